//! Watch health and self-metrics counters, shared by watchers and `/metrics`.

mod counters;
mod endpoint;

pub use endpoint::{AuthResult, Outcome, Review};

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::index::Resource;
use counters::{Counters, ErrorLabels, ReadLabels, ResourceLabels, SyncLabels};

/// Reads one counter; 0 when its series was never touched.
fn value<L: Clone + std::hash::Hash + Eq>(
    family: &prometheus_client::metrics::family::Family<
        L,
        prometheus_client::metrics::counter::Counter,
    >,
    labels: &L,
) -> u64 {
    family.get(labels).map_or(0, |c| c.get())
}

/// Why a watch failed: a closed set, so `watch_errors_total` has bounded
/// cardinality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorReason {
    /// 404: the resource (CRD) is not served.
    NotFound,
    /// 403: RBAC does not allow it.
    Forbidden,
    /// 401: credentials rejected.
    Unauthorized,
    /// 410: the resourceVersion expired; the watcher relists.
    Gone,
    /// 429: throttled.
    Throttled,
    /// 5xx from the API server.
    ServerError,
    /// Connection, TLS or stream failure.
    Transport,
    /// A response that could not be decoded.
    Decode,
    /// A request that got no answer in time.
    Timeout,
    /// Anything else.
    Other,
}

impl ErrorReason {
    /// Every reason, in label order.
    pub const ALL: [ErrorReason; 10] = [
        ErrorReason::NotFound,
        ErrorReason::Forbidden,
        ErrorReason::Unauthorized,
        ErrorReason::Gone,
        ErrorReason::Throttled,
        ErrorReason::ServerError,
        ErrorReason::Transport,
        ErrorReason::Decode,
        ErrorReason::Timeout,
        ErrorReason::Other,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::NotFound => "not_found",
            ErrorReason::Forbidden => "forbidden",
            ErrorReason::Unauthorized => "unauthorized",
            ErrorReason::Gone => "gone",
            ErrorReason::Throttled => "throttled",
            ErrorReason::ServerError => "server_error",
            ErrorReason::Transport => "transport",
            ErrorReason::Decode => "decode",
            ErrorReason::Timeout => "timeout",
            ErrorReason::Other => "other",
        }
    }

    /// The reason for an HTTP status code from the API server.
    pub fn from_status(code: u16) -> ErrorReason {
        match code {
            404 => ErrorReason::NotFound,
            403 => ErrorReason::Forbidden,
            401 => ErrorReason::Unauthorized,
            410 => ErrorReason::Gone,
            429 => ErrorReason::Throttled,
            500..=599 => ErrorReason::ServerError,
            _ => ErrorReason::Other,
        }
    }
}

/// Result of a live pod read, for `pod_reads_total{result}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadResult {
    /// The pod exists.
    Found,
    /// 404.
    NotFound,
    /// Any other failure.
    Error,
}

impl ReadResult {
    /// Every result, in label order.
    pub const ALL: [ReadResult; 3] = [ReadResult::Found, ReadResult::NotFound, ReadResult::Error];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadResult::Found => "found",
            ReadResult::NotFound => "not_found",
            ReadResult::Error => "error",
        }
    }
}

/// How a watch got a whole state of its scope (a first sync or a relist):
/// the label of `watch_syncs_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyncMode {
    /// One streaming watch-list (`sendInitialEvents=true`) that goes on as
    /// the watch.
    Stream,
    /// A paged LIST, then a watch from its resourceVersion.
    Paged,
}

impl SyncMode {
    /// Every mode, in label order.
    pub const ALL: [SyncMode; 2] = [SyncMode::Stream, SyncMode::Paged];

    /// The `mode` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Stream => "stream",
            SyncMode::Paged => "paged",
        }
    }
}

/// One registered watch: a resource in one namespace scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatchId(usize);

#[derive(Clone, Debug)]
struct WatchState {
    resource: Resource,
    scope: String,
    /// A first list has finished at some point.
    synced: bool,
    /// The last list or watch request succeeded and its stream is alive.
    up: bool,
    /// The first list finished, or failed in a way retries will not fix
    /// soon (a missing CRD, missing RBAC): readiness stops waiting for it.
    settled: bool,
    /// When a request of this watch last succeeded (list, watch start,
    /// event or bookmark).
    last_success: Option<(Instant, SystemTime)>,
    /// When the current failure episode began.
    down_since: Option<Instant>,
    last_reason: Option<ErrorReason>,
}

/// A watch that is not up, for `/readyz` and the status page.
#[derive(Clone, Debug, PartialEq)]
pub struct NotUp {
    /// The resource.
    pub resource: Resource,
    /// Its namespace scope ("" for all namespaces).
    pub scope: String,
    /// How long since its last success; None when it never succeeded.
    pub since_success: Option<Duration>,
    /// Why it last failed, if it did.
    pub reason: Option<ErrorReason>,
}

/// What a success changed, so the caller logs a recovery once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Success {
    /// It was up already, or had not failed since its last success.
    Steady,
    /// It had failed and is up again after this long.
    Recovered(Duration),
}

/// Health of every watch, one entry per (resource, namespace scope).
///
/// `watch_up` means "the last request of this watch succeeded and its
/// stream is alive": it drops on the first failure and returns on the next
/// success, so data that stopped flowing is never reported as fresh.
#[derive(Debug)]
pub struct Health {
    watches: Mutex<Vec<WatchState>>,
    counters: Counters,
    /// Bumped by every call that can move a health value, so a task that
    /// waits on one (the deadlines' checker) wakes only then.
    moved: tokio::sync::watch::Sender<u64>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            watches: Mutex::default(),
            counters: Counters::default(),
            moved: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Health {
    /// A new, empty health registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver that sees every change of a health value (watch state,
    /// last success, a counter).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.moved.subscribe()
    }

    /// The number of health changes so far: equal numbers, equal values.
    pub fn generation(&self) -> u64 {
        *self.moved.borrow()
    }

    fn moved(&self) {
        self.moved.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<WatchState>) -> T) -> T {
        match self.watches.lock() {
            Ok(mut w) => f(&mut w),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// [`Health::with`] for a change: tells the subscribers afterwards.
    fn change<T>(&self, f: impl FnOnce(&mut Vec<WatchState>) -> T) -> T {
        let out = self.with(f);
        self.moved();
        out
    }

    /// Declares a watch so it counts for readiness before its first event.
    /// Registering the same (resource, scope) twice returns the same id.
    pub fn register(&self, resource: Resource, scope: &str) -> WatchId {
        let id = self.change(|w| {
            if let Some(i) = w
                .iter()
                .position(|s| s.resource == resource && s.scope == scope)
            {
                return WatchId(i);
            }
            w.push(WatchState {
                resource,
                scope: scope.to_string(),
                synced: false,
                up: false,
                settled: false,
                last_success: None,
                down_since: None,
                last_reason: None,
            });
            WatchId(w.len() - 1)
        });
        id
    }

    /// The resource and scope of a watch.
    pub fn describe(&self, id: WatchId) -> (Resource, String) {
        self.with(|w| {
            w.get(id.0)
                .map(|s| (s.resource, s.scope.clone()))
                .unwrap_or((Resource::Leases, String::new()))
        })
    }

    /// Counts one watch event.
    pub fn on_event(&self, resource: Resource) {
        self.counters
            .events
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
        self.moved();
    }

    /// Counts one whole sync of `resource` (a first sync or a relist) made
    /// in `mode`.
    pub fn on_sync_mode(&self, resource: Resource, mode: SyncMode) {
        self.counters
            .syncs
            .get_or_create(&SyncLabels {
                resource: resource.into(),
                mode,
            })
            .inc();
        self.moved();
    }

    /// Whole syncs of `resource` made in `mode`.
    pub fn syncs(&self, resource: Resource, mode: SyncMode) -> u64 {
        value(
            &self.counters.syncs,
            &SyncLabels {
                resource: resource.into(),
                mode,
            },
        )
    }

    /// A request of the watch succeeded (a list page, a watch that opened,
    /// an event or a bookmark on it).
    pub fn on_success(&self, id: WatchId) -> Success {
        let now = Instant::now();
        let success = self.change(|w| {
            let Some(st) = w.get_mut(id.0) else {
                return Success::Steady;
            };
            st.last_success = Some((now, SystemTime::now()));
            st.last_reason = None;
            let was = st.down_since.take();
            st.up = true;
            match was {
                Some(t) => Success::Recovered(now.saturating_duration_since(t)),
                None => Success::Steady,
            }
        });
        success
    }

    /// A first list (or a relist) finished: the watch holds the whole truth.
    pub fn on_synced(&self, id: WatchId) -> Success {
        let first = self.change(|w| {
            w.get_mut(id.0).map(|st| {
                let first = !st.synced;
                st.synced = true;
                st.settled = true;
                first
            })
        });
        match (self.on_success(id), first) {
            (Success::Steady, Some(true)) => Success::Steady,
            (s, _) => s,
        }
    }

    /// Counts an error that does not interrupt the watch (one undecodable
    /// event on a live stream).
    pub fn count_error(&self, resource: Resource, reason: ErrorReason) {
        self.counters
            .errors
            .get_or_create(&ErrorLabels {
                resource: resource.into(),
                reason,
            })
            .inc();
        self.moved();
    }

    /// Records a failed request; returns true when it starts a failure
    /// episode or changes its reason (so the caller logs once per episode).
    pub fn on_error(&self, id: WatchId, reason: ErrorReason) -> bool {
        let now = Instant::now();
        if let Some(resource) = self.with(|w| w.get(id.0).map(|s| s.resource)) {
            self.count_error(resource, reason);
        }
        let first = self.change(|w| {
            let Some(st) = w.get_mut(id.0) else {
                return false;
            };
            let first = st.down_since.is_none() || st.last_reason != Some(reason);
            st.up = false;
            st.down_since.get_or_insert(now);
            if !st.synced
                && matches!(
                    reason,
                    ErrorReason::NotFound | ErrorReason::Forbidden | ErrorReason::Unauthorized
                )
            {
                st.settled = true;
            }
            st.last_reason = Some(reason);
            first
        });
        first
    }

    /// Counts one live pod read.
    pub fn on_pod_read(&self, result: ReadResult) {
        self.counters
            .pod_reads
            .get_or_create(&ReadLabels { result })
            .inc();
        self.moved();
    }

    /// True while every scope of `resource` has listed once and its last
    /// request succeeded. A resource with no watch is not up.
    pub fn watch_up(&self, resource: Resource) -> bool {
        self.with(|w| {
            let mut any = false;
            for st in w.iter().filter(|s| s.resource == resource) {
                any = true;
                if !(st.synced && st.up) {
                    return false;
                }
            }
            any
        })
    }

    /// The oldest "last success" across the scopes of `resource`: how old
    /// its data may be. None until every scope has succeeded once.
    pub fn last_success(&self, resource: Resource) -> Option<SystemTime> {
        self.with(|w| {
            let mut oldest: Option<SystemTime> = None;
            let mut any = false;
            for st in w.iter().filter(|s| s.resource == resource) {
                any = true;
                let (_, at) = st.last_success?;
                oldest = Some(oldest.map_or(at, |o| o.min(at)));
            }
            if any {
                oldest
            } else {
                None
            }
        })
    }

    /// Every watch that is not up, in registration order.
    pub fn not_up(&self) -> Vec<NotUp> {
        let now = Instant::now();
        self.with(|w| {
            w.iter()
                .filter(|s| !(s.synced && s.up))
                .map(|s| NotUp {
                    resource: s.resource,
                    scope: s.scope.clone(),
                    since_success: s
                        .last_success
                        .map(|(t, _)| now.saturating_duration_since(t)),
                    reason: s.last_reason,
                })
                .collect()
        })
    }

    /// True when `resource` is watched at all.
    pub fn is_watched(&self, resource: Resource) -> bool {
        self.with(|w| w.iter().any(|s| s.resource == resource))
    }

    /// Ready once every watch has finished its first list, or has settled
    /// on an error a retry will not fix soon (reported via watch_up 0).
    /// Start-up only: later failures show in watch_up, not here.
    pub fn ready(&self) -> bool {
        self.with(|w| !w.is_empty() && w.iter().all(|s| s.settled))
    }

    /// Watch events seen for `resource`.
    pub fn events(&self, resource: Resource) -> u64 {
        value(
            &self.counters.events,
            &ResourceLabels {
                resource: resource.into(),
            },
        )
    }

    /// Watch errors seen for `resource` with `reason`.
    pub fn errors(&self, resource: Resource, reason: ErrorReason) -> u64 {
        value(
            &self.counters.errors,
            &ErrorLabels {
                resource: resource.into(),
                reason,
            },
        )
    }

    /// Live pod reads with `result`.
    pub fn pod_reads(&self, result: ReadResult) -> u64 {
        value(&self.counters.pod_reads, &ReadLabels { result })
    }
}

#[cfg(test)]
mod tests;
