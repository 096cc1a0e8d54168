//! One resource's list-then-watch loop, with every request bounded in time
//! and every failure reported.
//!
//! kube-runtime's `watcher` hides what an alerting sidecar must show: the
//! client retries 429/503 on its own, a quiet watch on a hung server is only
//! noticed when the server-side timeout would have closed it, and a resumed
//! watch emits nothing. This loop makes each request itself, so that
//! `watch_up` follows the last request of the watch:
//!
//! - a whole state of the scope comes from one streaming watch-list
//!   (`sendInitialEvents=true`, ended by the `k8s.io/initial-events-end`
//!   bookmark) where the server streams them, else from a paged list; the
//!   choice is made once per server ([`crate::watch::WatchList`]) and counted
//!   (`watch_syncs_total{mode}`);
//! - a list page or watch-start request that gets no answer within
//!   [`Timing::request`] is a `timeout` failure;
//! - a watch asks the server to close it after 5-10 min
//!   ([`Timing::watch_timeout`]) and asks for bookmarks; one that delivers
//!   nothing for [`Timing::silence`] is restarted where the server sends
//!   bookmarks or no ping watches the connection (HTTP/1.1), else past its
//!   timeout (the restart's own request is what tells a hung server from a
//!   dead connection);
//! - every failure counts and backs off (capped, with jitter); what follows
//!   it is a whole state unless the failure leaves the watch's version
//!   good (a 429, a broken stream: `resumes_after`);
//! - an event that cannot be decoded is counted (`decode`) and marks the
//!   scope for a relist: the change it carried is lost, and with bookmarks
//!   a watch can resume for ever without listing again, so nothing else
//!   would repair it. The relist happens when the watch ends, and at the
//!   latest [`Timing::relist_within`] after the event;
//! - two watch starts of a scope are at least [`Timing::watch_min_interval`]
//!   apart, and a watch that ends cleanly within that interval without
//!   delivering anything (a proxy that answers 200 and closes) is a
//!   `transport` failure: counted, backed off, `watch_up` 0.
//!
//! This file holds the loop ([`run`]), the paged list and the pause after a
//! failure. Beside it: the limits and the backoff (`timing`), how a request
//! fails (`request`), what a watch reports to the index and health and the
//! log (`sink`), and one watch request followed to its end (`follow`).

use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::health::{ErrorReason, SyncMode};
use crate::index::{Index, IndexResource};
use crate::shared::Shared;
use crate::watch::follow;
use crate::watch::ingest::Ingest;
use crate::watch::proto::Protobuf;
use crate::watch::request::{bounded, Failed};
use crate::watch::sink::{Item, Sink};
use crate::watch::timing::{Backoff, Timing};

/// Server-side filters of one watch.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: Option<&'static str>,
    /// Field selector.
    pub fields: Option<&'static str>,
}

/// Why [`run`] returned.
#[derive(Debug)]
pub enum Exit {
    /// The caller's `give_up` accepted this error before the first list.
    GaveUp(kube::Error),
}

/// Lists, then watches, `api` forever, feeding trimmed objects to `ingest`.
///
/// A whole state of the scope (the first sync, a relist) comes from one
/// streaming watch-list while the server streams them
/// ([`crate::watch::WatchList::streams`]), else from a paged list followed by a watch.
///
/// Returns only when `give_up` accepts an error met before the first sync
/// succeeded (a version of a resource that is not served, a rejected
/// selector), so the caller can try another way.
pub async fn run<K, T, F>(
    shared: &Shared,
    ingest: Ingest<T>,
    api: Api<K>,
    selectors: Selectors,
    timing: Timing,
    trim: F,
    give_up: impl Fn(&kube::Error) -> bool,
) -> Exit
where
    K: kube::Resource + Clone + DeserializeOwned + Protobuf + std::fmt::Debug + Send + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let mut sink = Sink { shared, ingest };
    let mut backoff = Backoff::new(timing);
    let mut version: Option<String> = None;
    let mut progress = Progress {
        synced: false,
        relist_by: None,
        bookmarks_seen: false,
        long_line_logged: false,
    };
    let mut last_watch: Option<Instant> = None;
    loop {
        if progress.relist_by.is_some() {
            version = None;
        }
        let streaming = version.is_none() && shared.watch_list.streams();
        let attempt = Instant::now();
        let rv = match version.take() {
            Some(rv) => rv,
            // The watch-list is the list: no LIST request at all.
            None if streaming => String::new(),
            None => match list(&mut sink, &api, &selectors, timing, &trim).await {
                Ok(rv) => {
                    progress.synced = true;
                    progress.relist_by = None;
                    backoff.reset();
                    rv
                }
                Err(Failed::Api(err)) if !progress.synced && give_up(&err) => {
                    return Exit::GaveUp(err)
                }
                Err(f) => {
                    sink.failure(f.reason(), "list", &f);
                    pause(shared, &mut backoff, f.reason(), attempt.elapsed()).await;
                    continue;
                }
            },
        };
        // Paced, whatever the last watch did: see `Timing::watch_min_interval`.
        if let Some(at) = last_watch {
            tokio::time::sleep_until(at + timing.watch_min_interval).await;
        }
        last_watch = Some(Instant::now());
        let attempt = Instant::now();
        let seconds = backoff.watch_seconds();
        let opened = follow::open(
            &api,
            &selectors,
            timing,
            seconds,
            &rv,
            streaming,
            shared.wire.protobuf(),
        )
        .await;
        let stream = match opened {
            Ok(s) => s,
            // A watch cache still filling answers a watch-list 429 ("storage
            // is (re)initializing", Retry-After 1 s) while a LIST, which it
            // hands to etcd, is answered: this one sync is paged, at once.
            Err(Failed::Api(err)) if streaming && follow::cache_initializing(&err) => {
                tracing::debug!(
                    resource = sink.ingest.resource().as_str(),
                    error = %err,
                    "the watch cache is initializing; this sync is a paged list"
                );
                version = Some(
                    match list(&mut sink, &api, &selectors, timing, &trim).await {
                        Ok(rv) => {
                            progress.synced = true;
                            progress.relist_by = None;
                            backoff.reset();
                            rv
                        }
                        Err(f) => {
                            sink.failure(f.reason(), "list", &f);
                            pause(shared, &mut backoff, f.reason(), attempt.elapsed()).await;
                            continue;
                        }
                    },
                );
                continue;
            }
            Err(Failed::Api(err)) if streaming && follow::rejects_streaming(&err) => {
                shared.watch_list.fall_back(
                    sink.ingest.resource(),
                    &format!("the watch-list was refused: {err}"),
                );
                continue;
            }
            Err(Failed::Api(err)) if !progress.synced && give_up(&err) => return Exit::GaveUp(err),
            Err(f) => {
                sink.failure(f.reason(), "watch", &f);
                if !streaming && resumes_after(&f, false) {
                    version = Some(rv);
                }
                pause(shared, &mut backoff, f.reason(), attempt.elapsed()).await;
                continue;
            }
        };
        sink.success();
        let initial = streaming.then_some(Initial {
            backoff: &mut backoff,
        });
        match follow::follow(
            &mut sink,
            stream,
            timing,
            seconds,
            &trim,
            rv,
            &mut progress,
            initial,
        )
        .await
        {
            WatchEnd::Resume(rv) => {
                backoff.reset();
                version = Some(rv);
            }
            WatchEnd::NotStreaming(why) => {
                shared.watch_list.fall_back(sink.ingest.resource(), why);
            }
            WatchEnd::Failed(f, resume) => {
                sink.failure(f.reason(), "watch", &f);
                if resumes_after(&f, true) {
                    version = resume;
                }
                pause(shared, &mut backoff, f.reason(), attempt.elapsed()).await;
            }
        }
    }
}

/// Whether the next watch may start from the last version after the
/// failure `f` of a watch start (`opened` false) or of an open watch,
/// rather than from a whole new state. As client-go's reflector does: a
/// watch start that failed resumes only after a 429 (the server answered
/// and asked to wait) or a refused connection (nothing listens: a restart,
/// whose missed changes the watch from the last version asks for, or
/// answers 410 for); an open watch resumes after a 429, a broken stream
/// (client-go takes a reset or a cut body for the watch's end) and a
/// watch the server closed at once (relisting once a second for a proxy
/// that closes every watch would be a list a second). After any other
/// failure (no answer in time, a connection that failed otherwise, a 5xx, a refusal, an ERROR
/// event) what happened meanwhile is read whole: a watch from a version
/// is only as good as the server's memory of the changes since it, and a
/// server that hung, restarted or failed over may have none (issue 33: an
/// HTTP/1.1 server that came back never sent the changes made while it
/// hung).
fn resumes_after(f: &Failed, opened: bool) -> bool {
    match f.reason() {
        ErrorReason::Throttled => true,
        ErrorReason::Transport => opened || f.connection_refused(),
        _ => false,
    }
}

/// What the loop has learned of its scope, kept across watches.
pub(super) struct Progress {
    /// A whole state has been synced once.
    pub(super) synced: bool,
    /// When the scope must be listed again because a watch event could not
    /// be decoded (set by `follow`, cleared by a whole sync).
    pub(super) relist_by: Option<Instant>,
    /// A watch of this scope has had a bookmark that was not the end of
    /// initial events: the server sends them, so a silence is a fault.
    pub(super) bookmarks_seen: bool,
    /// A watch line too long to read has been logged for this scope.
    pub(super) long_line_logged: bool,
}

/// The part of the loop a streaming watch-list resets when its initial
/// events end.
pub(super) struct Initial<'a> {
    backoff: &'a mut Backoff,
}

impl Initial<'_> {
    /// The initial events ended: the watch holds the whole truth.
    pub(super) fn done(self, progress: &mut Progress) {
        progress.synced = true;
        progress.relist_by = None;
        self.backoff.reset();
    }
}

/// Waits before the next attempt after a failure of `reason`: the
/// backoff, less the time the failed attempt already took (a request that
/// timed out has waited long enough: the server is not asked more often
/// than the backoff says, and a server that comes back is seen within one
/// connect timeout), or longer when the API server asked for it
/// (Retry-After on a 429 or 503, capped). A timeout first drops the pooled
/// connections: the one that did not answer may be half-open, and the
/// next try must dial.
async fn pause(shared: &Shared, backoff: &mut Backoff, reason: ErrorReason, took: Duration) {
    if reason == ErrorReason::Timeout {
        shared.api.reset_connections();
    }
    let mut wait = backoff.next(reason).saturating_sub(took);
    if matches!(reason, ErrorReason::Throttled | ErrorReason::ServerError) {
        if let Some(asked) = shared.api.retry_after_remaining() {
            wait = wait.max(asked);
        }
    }
    tokio::time::sleep(wait).await;
}

/// Lists every page and hands the result to the index as one resync.
/// Returns the list's resourceVersion, where the watch starts.
async fn list<K, T, F>(
    sink: &mut Sink<'_, T>,
    api: &Api<K>,
    selectors: &Selectors,
    timing: Timing,
    trim: &F,
) -> Result<String, Failed>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let mut params = ListParams::default().limit(timing.page_size);
    if let Some(l) = selectors.labels {
        params = params.labels(l);
    }
    if let Some(f) = selectors.fields {
        params = params.fields(f);
    }
    let mut started = false;
    loop {
        let page = bounded(timing.request, api.list(&params)).await?;
        if !started {
            sink.event(watcher::Event::Init);
            started = true;
        }
        sink.success();
        for obj in &page.items {
            sink.event(watcher::Event::InitApply(trim(obj)));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => {
                sink.event(watcher::Event::InitDone);
                sink.synced(SyncMode::Paged);
                return Ok(page.metadata.resource_version.unwrap_or_default());
            }
        }
    }
}

/// How a watch ended.
pub(super) enum WatchEnd {
    /// The stream ended or went quiet: watch again from this version.
    Resume(String),
    /// A request or the stream failed; resume from the version if any.
    Failed(Failed, Option<String>),
    /// A watch-list did not stream its initial events as asked (the
    /// server ignores `sendInitialEvents`): list in pages from now on.
    NotStreaming(&'static str),
}
