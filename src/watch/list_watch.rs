//! One resource's list-then-watch loop, with every request bounded in time
//! and every failure reported.
//!
//! kube-runtime's `watcher` hides what an alerting sidecar must show: the
//! client retries 429/503 on its own, a quiet watch on a hung server is only
//! noticed when the server-side timeout would have closed it, and a resumed
//! watch emits nothing. This loop makes each request itself, so that
//! `watch_up` follows the last request of the watch:
//!
//! - a list (paginated) or watch-start request that gets no answer within
//!   [`Timing::request`] is a `timeout` failure;
//! - a watch asks the server to close it after [`Timing::server_timeout`]
//!   and asks for bookmarks; one that delivers nothing for that long plus
//!   [`Timing::idle_margin`] is restarted (the restart's own request is what
//!   tells a hung server from one that ignores `timeoutSeconds`);
//! - every failure counts and backs off (capped, with jitter); a 410 relists;
//! - an event that cannot be decoded is counted (`decode`) and marks the
//!   scope for a relist: the change it carried is lost, and with bookmarks
//!   a watch can resume for ever without listing again, so nothing else
//!   would repair it. The relist happens when the watch ends, and at the
//!   latest [`Timing::server_timeout`] after the event;
//! - two watch starts of a scope are at least [`Timing::watch_min_interval`]
//!   apart, and a watch that ends cleanly within that interval without
//!   delivering anything (a proxy that answers 200 and closes) is a
//!   `transport` failure: counted, backed off, `watch_up` 0.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::health::{ErrorReason, Success};
use crate::index::{Index, IndexResource};
use crate::shared::Shared;
use crate::watch::ingest::Ingest;
use crate::watch::trim::Trimmed;

/// The trimmed form of a watch object of item type `T`.
type Item<T> = Trimmed<<Index as IndexResource<T>>::Key, T>;

/// Time limits of the loop. [`Timing::DEFAULT`] is what production uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The longest a list page or a watch start may take to answer.
    pub request: Duration,
    /// `timeoutSeconds` asked of the server for each watch.
    pub server_timeout: Duration,
    /// How long past `server_timeout` a silent watch is kept.
    pub idle_margin: Duration,
    /// First pause after a failure; doubles per failure.
    pub backoff_min: Duration,
    /// Longest pause after a transient failure (5xx, 429, transport,
    /// timeout): recovery shows within this of the server answering again.
    pub backoff_max: Duration,
    /// Longest pause after a 401, 403 or 404 (RBAC or a CRD missing).
    pub backoff_max_config: Duration,
    /// Objects per list page.
    pub page_size: u32,
    /// The least time from one watch start of a scope to the next. A watch
    /// that ends cleanly resets the backoff, so without this a server or
    /// proxy that answers every watch and closes it at once would be asked
    /// again without pause.
    pub watch_min_interval: Duration,
}

impl Timing {
    /// Production limits: a hung API is noticed within
    /// `server_timeout + idle_margin + request` = 95 s.
    pub const DEFAULT: Timing = Timing {
        request: Duration::from_secs(20),
        server_timeout: Duration::from_secs(60),
        idle_margin: Duration::from_secs(15),
        backoff_min: Duration::from_secs(1),
        backoff_max: Duration::from_secs(8),
        backoff_max_config: Duration::from_secs(30),
        page_size: 500,
        watch_min_interval: Duration::from_secs(1),
    };
}

/// Server-side filters of one watch.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: Option<&'static str>,
    /// Field selector.
    pub fields: Option<&'static str>,
}

/// Maps a client error to its closed-set reason.
pub fn reason_of(err: &kube::Error) -> ErrorReason {
    match err {
        kube::Error::Api(status) => ErrorReason::from_status(status.code),
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => ErrorReason::Decode,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ErrorReason::Transport
        }
        _ => ErrorReason::Other,
    }
}

/// Why [`run`] returned.
#[derive(Debug)]
pub enum Exit {
    /// The caller's `give_up` accepted this error before the first list.
    GaveUp(kube::Error),
}

/// Exponential backoff with jitter, reset by a success.
#[derive(Debug)]
struct Backoff {
    timing: Timing,
    failures: u32,
    seed: u64,
}

impl Backoff {
    fn new(timing: Timing) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.subsec_nanos() as u64 | 1);
        Backoff {
            timing,
            failures: 0,
            seed,
        }
    }

    fn reset(&mut self) {
        self.failures = 0;
    }

    /// The pause before the next attempt: min * 2^failures, capped, then
    /// 80..100 % of that so watches that failed together spread out. A
    /// 401 backs off as a transient failure: a rotated token is fixed by
    /// the next read of the token file, not by a person.
    fn next(&mut self, reason: ErrorReason) -> Duration {
        let cap = match reason {
            ErrorReason::NotFound | ErrorReason::Forbidden => self.timing.backoff_max_config,
            _ => self.timing.backoff_max,
        };
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = self.timing.backoff_min.saturating_mul(1 << exp).min(cap);
        // xorshift64: jitter needs no cryptographic quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let pct = 80 + (self.seed % 21) as u32;
        base * pct / 100
    }
}

/// `plural.group` as RBAC and kubectl name a resource (`pods` for the
/// core group).
fn rbac_name(resource: crate::index::Resource) -> String {
    let spec = resource.spec();
    if spec.group.is_empty() {
        spec.plural.to_string()
    } else {
        format!("{}.{}", spec.plural, spec.group)
    }
}

/// How long after the API server came back a 403 may be its authorizer
/// still loading.
const JUST_RESTARTED: Duration = Duration::from_secs(30);

/// What the loop reports to: the index (through `ingest`) and health.
struct Sink<'a, T>
where
    Index: IndexResource<T>,
{
    shared: &'a Shared,
    ingest: Ingest<T>,
}

impl<T> Sink<'_, T>
where
    Index: IndexResource<T>,
{
    fn success(&self) {
        if let Success::Recovered(after) = self.shared.health.on_success(self.ingest.watch_id()) {
            self.log_recovered(after);
        }
    }

    fn log_recovered(&self, after: Duration) {
        let resource = self.ingest.resource();
        tracing::info!(
            resource = resource.as_str(),
            scope = self.ingest.namespace(),
            down_seconds = after.as_secs(),
            "watch recovered"
        );
    }

    fn failure(&self, reason: ErrorReason, what: &str, detail: &dyn std::fmt::Display) {
        let resource = self.ingest.resource();
        if !self.shared.health.on_error(self.ingest.watch_id(), reason) {
            tracing::debug!(resource = resource.as_str(), scope = self.ingest.namespace(), reason = reason.as_str(), error = %detail, "{what} failed again");
            return;
        }
        match reason {
            ErrorReason::NotFound => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                "resource not served by the API server (CRD not installed?); retrying"
            ),
            // A kube-apiserver that has just started refuses for a few
            // seconds until its authorizer has loaded RBAC; say so only
            // when the server was unreachable a moment ago, else the
            // reader would look there instead of at the missing rule.
            ErrorReason::Forbidden if self.shared.api.came_back_within(JUST_RESTARTED) => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                "access denied just after the API server came back (a kube-apiserver that just started refuses for a few seconds until its authorization cache is loaded); retrying"
            ),
            ErrorReason::Forbidden => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                error = %detail,
                "access denied: RBAC does not let this exporter's identity get, list and watch {} in {}; grant them (the chart's ClusterRole, or a Role in each watched namespace); retrying",
                rbac_name(resource),
                if self.ingest.namespace().is_empty() { "all namespaces" } else { self.ingest.namespace() }
            ),
            ErrorReason::Unauthorized => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                "the API server does not accept the exporter's credentials (401): the token expired or was revoked, or the kubeconfig is wrong; retrying (a token file is read again)"
            ),
            _ => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                error = %detail,
                "{what} failed; data of this resource is not current until it recovers; retrying with backoff"
            ),
        }
    }

    fn event(&mut self, ev: watcher::Event<Item<T>>) {
        self.ingest.event(self.shared, ev);
    }
}

/// Lists, then watches, `api` forever, feeding trimmed objects to `ingest`.
///
/// Returns only when `give_up` accepts an error met before the first list
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
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let mut sink = Sink { shared, ingest };
    let mut backoff = Backoff::new(timing);
    let mut version: Option<String> = None;
    let mut synced = false;
    // When the scope must be listed again because a watch event could not
    // be decoded (set by `watch`, cleared by a list).
    let mut relist_by: Option<Instant> = None;
    let mut last_watch: Option<Instant> = None;
    loop {
        if relist_by.is_some() {
            version = None;
        }
        let attempt = Instant::now();
        let rv = match version.take() {
            Some(rv) => rv,
            None => match list(&mut sink, &api, &selectors, timing, &trim).await {
                Ok(rv) => {
                    synced = true;
                    relist_by = None;
                    backoff.reset();
                    rv
                }
                Err(Failed::Api(err)) if !synced && give_up(&err) => return Exit::GaveUp(err),
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
        match watch(
            &mut sink,
            &api,
            &selectors,
            timing,
            &trim,
            rv,
            &mut relist_by,
        )
        .await
        {
            WatchEnd::Resume(rv) => {
                backoff.reset();
                version = Some(rv);
            }
            WatchEnd::Failed(f, resume) => {
                sink.failure(f.reason(), "watch", &f);
                if f.reason() != ErrorReason::Gone {
                    version = resume;
                }
                pause(shared, &mut backoff, f.reason(), attempt.elapsed()).await;
            }
        }
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

/// A failed request.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("{0}")]
    Api(#[source] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("API error {code}: {message}")]
    Status { code: u16, message: String },
    #[error("watch closed {0:?} after it opened, before any event or bookmark")]
    ClosedAtOnce(Duration),
}

impl Failed {
    fn reason(&self) -> ErrorReason {
        match self {
            Failed::Api(e) => reason_of(e),
            Failed::Timeout(_) => ErrorReason::Timeout,
            Failed::Status { code, .. } => ErrorReason::from_status(*code),
            // The stream gave nothing and ended: to us, a broken stream.
            Failed::ClosedAtOnce(_) => ErrorReason::Transport,
        }
    }
}

async fn bounded<F: std::future::Future<Output = Result<O, kube::Error>>, O>(
    limit: Duration,
    f: F,
) -> Result<O, Failed> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(e)) => Err(Failed::Api(e)),
        Err(_) => Err(Failed::Timeout(limit)),
    }
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
                return Ok(page.metadata.resource_version.unwrap_or_default());
            }
        }
    }
}

enum WatchEnd {
    /// The stream ended or went quiet: watch again from this version.
    Resume(String),
    /// A request or the stream failed; resume from the version if any.
    Failed(Failed, Option<String>),
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

async fn watch<K, T, F>(
    sink: &mut Sink<'_, T>,
    api: &Api<K>,
    selectors: &Selectors,
    timing: Timing,
    trim: &F,
    mut rv: String,
    relist_by: &mut Option<Instant>,
) -> WatchEnd
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let secs = u32::try_from(timing.server_timeout.as_secs()).unwrap_or(60);
    let mut params = WatchParams::default().timeout(secs);
    if let Some(l) = selectors.labels {
        params = params.labels(l);
    }
    if let Some(f) = selectors.fields {
        params = params.fields(f);
    }
    let stream = match bounded(timing.request, api.watch(&params, &rv)).await {
        Ok(s) => s,
        Err(f) => return WatchEnd::Failed(f, Some(rv)),
    };
    sink.success();
    let opened = Instant::now();
    // Anything at all (an event, a bookmark, an undecodable line): the
    // stream carried data, so its end is not a proxy closing at once.
    let mut delivered = false;
    futures::pin_mut!(stream);
    let idle = timing.server_timeout + timing.idle_margin;
    loop {
        // A relist that is due ends the watch even if it keeps streaming
        // (a server or proxy that ignores `timeoutSeconds`).
        let wait = match *relist_by {
            Some(by) => by.saturating_duration_since(Instant::now()).min(idle),
            None => idle,
        };
        let item = match tokio::time::timeout(wait, stream.next()).await {
            Err(_) if relist_by.is_some_and(|by| by <= Instant::now()) => {
                tracing::info!(
                    resource = sink.ingest.resource().as_str(),
                    scope = sink.ingest.namespace(),
                    "relisting after an undecodable watch event"
                );
                return WatchEnd::Resume(rv);
            }
            Err(_) => {
                tracing::debug!(
                    resource = sink.ingest.resource().as_str(),
                    "watch silent past its server timeout; restarting it"
                );
                // The server should have closed it: its connection may be
                // half-open, so the restart must not queue on it.
                sink.shared.api.reset_connections();
                return WatchEnd::Resume(rv);
            }
            Ok(None) => {
                let lasted = opened.elapsed();
                if !delivered && lasted < timing.watch_min_interval {
                    return WatchEnd::Failed(Failed::ClosedAtOnce(lasted), Some(rv));
                }
                return WatchEnd::Resume(rv);
            }
            Ok(Some(item)) => item,
        };
        delivered = true;
        match item {
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
                rv = b.metadata.resource_version;
                sink.success();
            }
            Ok(WatchEvent::Error(status)) => {
                let f = Failed::Status {
                    code: status.code,
                    message: status.message.clone(),
                };
                return WatchEnd::Failed(f, Some(rv));
            }
            // One undecodable line loses one change, not the stream: count
            // it, go on, and mark the scope for a relist, the one thing
            // that repairs what the lost change would have said (a lost
            // DELETED is otherwise a ghost for as long as the process
            // runs). Not at once: the rest of the stream is still good,
            // and a relist per bad line could list a large scope without
            // pause; at most one server timeout later, which also bounds
            // the relists a stream of bad lines can cause.
            Err(e) if undecodable(&e) => {
                let resource = sink.ingest.resource();
                sink.shared
                    .health
                    .count_error(resource, ErrorReason::Decode);
                let by = *relist_by.get_or_insert_with(|| Instant::now() + timing.server_timeout);
                tracing::warn!(
                    resource = resource.as_str(),
                    scope = sink.ingest.namespace(),
                    error = %e,
                    relist_in_seconds = by.saturating_duration_since(Instant::now()).as_secs(),
                    "undecodable watch event skipped; the scope is relisted when this watch ends"
                );
            }
            Err(e) => return WatchEnd::Failed(Failed::Api(e), Some(rv)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter_and_resets() {
        let t = Timing::DEFAULT;
        let mut b = Backoff::new(t);
        let first = b.next(ErrorReason::ServerError);
        assert!(first >= t.backoff_min * 8 / 10 && first <= t.backoff_min);
        let mut last = first;
        for _ in 0..20 {
            last = b.next(ErrorReason::ServerError);
            assert!(last <= t.backoff_max);
        }
        assert!(last >= t.backoff_max * 8 / 10);
        for _ in 0..20 {
            assert!(b.next(ErrorReason::Forbidden) <= t.backoff_max_config);
        }
        b.reset();
        assert!(b.next(ErrorReason::Timeout) <= t.backoff_min);
    }

    #[test]
    fn hung_api_detection_bound_is_under_two_minutes() {
        let t = Timing::DEFAULT;
        assert!(t.server_timeout + t.idle_margin + t.request < Duration::from_secs(120));
    }
}
