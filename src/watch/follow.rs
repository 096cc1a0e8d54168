//! One watch request: opened (a plain watch from a resourceVersion, or a
//! streaming watch-list that begins with the scope's whole state) and
//! followed until it ends, goes silent, or fails.
//!
//! A streaming watch-list (`sendInitialEvents=true`,
//! `resourceVersionMatch=NotOlderThan`, bookmarks on, no resourceVersion:
//! a consistent read, as client-go's reflector asks it) sends every object
//! as ADDED and then a BOOKMARK annotated `k8s.io/initial-events-end:
//! "true"` that carries the state's resourceVersion. The ADDED objects are
//! buffered like the pages of a list and replace the scope's content at
//! that bookmark, at once: a scrape never sees a half-synced resource. From
//! there on the same request is an ordinary watch.
//!
//! A server that ignores the parameters (a proxy that drops them; a server
//! older than 1.27 refuses `resourceVersionMatch` on a watch) answers an
//! ordinary watch instead: changes (MODIFIED, DELETED) or a bookmark
//! without the annotation before any initial-events-end. Either ends the
//! attempt as [`WatchEnd::NotStreaming`], and every watch lists in pages
//! from then on. An end of the stream, or silence, before that bookmark
//! says nothing definite (a server that restarts or is slow does the
//! same): [`WatchEnd::CutShort`] pages that one sync only.

use futures::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::encoding::open_watch;
use super::proto::Protobuf;
use super::request::{bounded, Events, Failed};
use super::resources::Selectors;
use super::sink::{Item, Sink};
use super::state::{clean_end, Scope, WatchEnd};
use super::timing::Timing;
use crate::health::{ErrorReason, SyncMode};
use crate::index::{Index, IndexResource};

/// The annotation on the bookmark that ends a watch-list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether a bookmark is the one that ends a watch-list's initial events
/// (annotated [`INITIAL_EVENTS_END`]: `"true"`).
pub(super) fn ends_initial_events(b: &kube::core::watch::Bookmark) -> bool {
    b.metadata
        .annotations
        .get(INITIAL_EVENTS_END)
        .is_some_and(|v| v == "true")
}

/// Opens a watch: from `rv`, or (`streaming`) a watch-list of the whole
/// state. `seconds` is the `timeoutSeconds` asked.
/// A built-in kind with a protobuf reader asks for protobuf unless
/// `protobuf` is false (`--api-protobuf=false`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn open<K>(
    api: &Api<K>,
    selectors: &Selectors,
    timing: Timing,
    seconds: u32,
    rv: &str,
    streaming: bool,
    protobuf: bool,
) -> Result<Events<K>, Failed>
where
    K: kube::Resource + Clone + DeserializeOwned + Protobuf + std::fmt::Debug + Send + 'static,
{
    let mut params = WatchParams::default().timeout(seconds);
    if streaming {
        params = params.initial_events();
    }
    if let Some(l) = selectors.labels {
        params = params.labels(l);
    }
    if let Some(f) = selectors.fields {
        params = params.fields(f);
    }
    let kind = K::PROTOBUF.filter(|_| protobuf);
    bounded(timing.request, open_watch(api, &params, rv, kind)).await
}

/// True for an error of one watch line that is not the stream's: the
/// line was not a watch event. kube-client reports a line that fails to
/// decode as an event but decodes as a `Status` as `Error::Api` of that
/// status, and `Status` has only defaulted fields, so any JSON object
/// does: code 0 is what such a line gives, never what a server sends in
/// a Status (those come as ERROR events, handled apart).
fn undecodable(e: &kube::Error) -> bool {
    match e {
        kube::Error::SerdeError(_) => true,
        kube::Error::Api(status) => status.code == 0,
        _ => false,
    }
}

/// How long a watch may stay silent before it is restarted. kube-apiserver
/// sends a watch a bookmark about once a minute, but only for a resource
/// whose watch cache has seen a change since it started (a CRD nothing
/// writes gets none: measured on 1.33 and 1.36). So: [`Timing::silence`]
/// once the scope's watches have had a bookmark (`bookmarks_seen`), or on a
/// connection no ping watches (HTTP/1.1, or nothing known yet); otherwise
/// HTTP/2 pings find a dead connection and the limit is the watch's own
/// timeout plus [`Timing::timeout_margin`] (the server should have ended
/// it by then).
fn silence_limit(
    api: &crate::client::ApiLink,
    timing: Timing,
    seconds: u32,
    bookmarks_seen: bool,
) -> std::time::Duration {
    if bookmarks_seen || api.unpinged() {
        timing.silence
    } else {
        std::time::Duration::from_secs(u64::from(seconds)) + timing.timeout_margin
    }
}

/// Follows an open watch until it ends. A watch-list (`streaming`) begins
/// with the scope's whole state, buffered until the initial-events-end
/// bookmark.
pub(super) async fn follow<K, T, F>(
    sink: &mut Sink<'_, T>,
    stream: Events<K>,
    scope: &mut Scope,
    seconds: u32,
    trim: &F,
    mut rv: String,
    streaming: bool,
) -> WatchEnd
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let timing = scope.timing;
    // Still reading a watch-list's initial events.
    let mut initial = streaming;
    let opened = Instant::now();
    // Anything at all (an event, a bookmark, an undecodable line): the
    // stream carried data, so its end is not a proxy closing at once.
    let mut delivered = false;
    // An initial event that could not be decoded: the state synced at the
    // end bookmark lacks it, so it is relisted soon after.
    let mut initial_lost = false;
    let mut stream = stream;
    if initial {
        sink.event(watcher::Event::Init);
    }
    loop {
        // Initial events come back to back; a silence between them is a
        // server that does not stream (or a hung one: the paged list that
        // follows will say so).
        let limit = if initial {
            timing.request
        } else {
            silence_limit(&sink.ctx.api, timing, seconds, scope.bookmarks_seen)
        };
        // A relist that is due ends the watch even if it keeps streaming
        // (a server or proxy that ignores `timeoutSeconds`). Not during
        // initial events: they are that relist, and a due one would leave
        // them no time at all.
        let wait = match scope.relist_by {
            Some(by) if !initial => by.saturating_duration_since(Instant::now()).min(limit),
            _ => limit,
        };
        let item = match tokio::time::timeout(wait, stream.next()).await {
            Err(_) if initial => {
                return WatchEnd::CutShort(
                    "no initial event and no initial-events-end bookmark for the request timeout",
                );
            }
            Err(_) if scope.relist_by.is_some_and(|by| by <= Instant::now()) => {
                tracing::info!(
                    resource = sink.ingest.resource().as_str(),
                    scope = sink.ingest.namespace(),
                    "relisting after an undecodable watch event"
                );
                return WatchEnd::Resume(rv);
            }
            Err(_) => {
                tracing::info!(
                    resource = sink.ingest.resource().as_str(),
                    scope = sink.ingest.namespace(),
                    silent_seconds = timing.silence.as_secs(),
                    "watch silent (no event, no bookmark); restarting it on a new connection"
                );
                // Its connection may be half-open (or, over HTTP/1.1 with
                // no pings, hung): the restart must not queue on it.
                sink.ctx.api.reset_connections();
                return WatchEnd::Resume(rv);
            }
            Ok(None) if initial => {
                // Ended before its initial events did: a server that
                // streams ends a watch-list there when it goes away (a
                // restart: the paged list will say so), and a proxy that
                // drops the parameters may close an ordinary watch so.
                return WatchEnd::CutShort(
                    "the watch-list ended before its initial-events-end bookmark",
                );
            }
            Ok(None) => {
                return clean_end(rv, delivered, opened.elapsed(), timing);
            }
            Ok(Some(item)) => item,
        };
        delivered = true;
        match item {
            Ok(WatchEvent::Added(o)) if initial => {
                sink.event(watcher::Event::InitApply(trim(&o)));
            }
            Ok(WatchEvent::Modified(_) | WatchEvent::Deleted(_)) if initial => {
                return WatchEnd::NotStreaming(
                    "a change came before the initial-events-end bookmark (the server ignores sendInitialEvents)",
                );
            }
            // A bookmark is a version to resume from; one without (a
            // broken server or proxy) would make the next watch start at
            // "now" and miss what changed between. A decode error of that
            // one event: counted, skipped, the version kept. It carried no
            // object, so nothing needs a relist; only an initial-events-end
            // bookmark without a version leaves the watch-list without one,
            // and that sync is paged instead.
            Ok(WatchEvent::Bookmark(b)) if b.metadata.resource_version.is_empty() => {
                let resource = sink.ingest.resource();
                sink.shared
                    .health
                    .count_error(resource, ErrorReason::Decode);
                tracing::warn!(
                    resource = resource.as_str(),
                    scope = sink.ingest.namespace(),
                    "a bookmark without a resourceVersion was skipped (counted as a decode error); the watch keeps its version"
                );
                if initial && ends_initial_events(&b) {
                    return WatchEnd::CutShort(
                        "the initial-events-end bookmark had no resourceVersion",
                    );
                }
            }
            Ok(WatchEvent::Bookmark(b)) if initial && !ends_initial_events(&b) => {
                // A streaming server sends no other bookmark before that
                // one: this is an ordinary watch.
                return WatchEnd::NotStreaming(
                    "a bookmark without initial-events-end came first (the server ignores sendInitialEvents)",
                );
            }
            Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                if let Some(v) = o.meta().resource_version.clone() {
                    rv = v;
                }
                sink.success();
                sink.event(watcher::Event::Apply(trim(&o)));
            }
            Ok(WatchEvent::Deleted(o)) => {
                if let Some(v) = o.meta().resource_version.clone() {
                    rv = v;
                }
                sink.success();
                sink.event(watcher::Event::Delete(trim(&o)));
            }
            Ok(WatchEvent::Bookmark(b)) => {
                let end = ends_initial_events(&b);
                rv = b.metadata.resource_version;
                if !end {
                    scope.bookmarks_seen = true;
                }
                if end && initial {
                    initial = false;
                    sink.event(watcher::Event::InitDone);
                    sink.synced(SyncMode::Stream);
                    scope.synced_whole();
                    if initial_lost {
                        scope.relist_by = Some(Instant::now() + timing.relist_within);
                    }
                }
                sink.success();
            }
            Ok(WatchEvent::Error(status)) => {
                let f = Failed::Status {
                    code: status.code,
                    message: status.message.clone(),
                };
                let resume = if initial { None } else { Some(rv) };
                return WatchEnd::Failed(f, resume);
            }
            // A line too long to read: its object is not known, and a
            // relist would meet it again. Counted (`decode`), logged once
            // per scope, skipped; the rest of the stream is read. A change
            // (not an initial event) marks the scope for a relist as an
            // undecodable one does: what it lost may be a deletion, which
            // the relist repairs; the relist's own too-long lines do not
            // mark it again.
            Err(kube::Error::LinesCodecMaxLineLengthExceeded) => {
                let resource = sink.ingest.resource();
                sink.shared
                    .health
                    .count_error(resource, ErrorReason::Decode);
                if !initial {
                    scope
                        .relist_by
                        .get_or_insert_with(|| Instant::now() + timing.relist_within);
                }
                if !std::mem::replace(&mut scope.long_line_logged, true) {
                    tracing::warn!(
                        resource = resource.as_str(),
                        scope = sink.ingest.namespace(),
                        max_bytes = super::encoding::MAX_LINE,
                        "a watch line too long to read was skipped (its object is not shown); counted as a decode error, logged once per scope"
                    );
                }
            }
            // One undecodable line loses one change, not the stream: count
            // it, go on, and mark the scope for a relist, the one thing
            // that repairs what the lost change would have said (a lost
            // DELETED is otherwise a ghost for as long as the process
            // runs). Not at once: the rest of the stream is still good,
            // and a relist per bad line could list a large scope without
            // pause; at most `relist_within` later, which also bounds the
            // relists a stream of bad lines can cause. During the initial
            // events the relist is due as soon as they end.
            Err(e) if undecodable(&e) => {
                let resource = sink.ingest.resource();
                sink.shared
                    .health
                    .count_error(resource, ErrorReason::Decode);
                initial_lost |= initial;
                let by = *scope
                    .relist_by
                    .get_or_insert_with(|| Instant::now() + timing.relist_within);
                tracing::warn!(
                    resource = resource.as_str(),
                    scope = sink.ingest.namespace(),
                    error = %e,
                    relist_in_seconds = by.saturating_duration_since(Instant::now()).as_secs(),
                    "undecodable watch event skipped; the scope is relisted when this watch ends"
                );
            }
            Err(e) => {
                let resume = if initial { None } else { Some(rv) };
                return WatchEnd::Failed(Failed::Api(e), resume);
            }
        }
    }
}
