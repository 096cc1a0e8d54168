//! Watch health and self-metrics counters, shared by watchers and `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::index::Resource;

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
    /// Anything else.
    Other,
}

impl ErrorReason {
    /// Every reason, in label order.
    pub const ALL: [ErrorReason; 9] = [
        ErrorReason::NotFound,
        ErrorReason::Forbidden,
        ErrorReason::Unauthorized,
        ErrorReason::Gone,
        ErrorReason::Throttled,
        ErrorReason::ServerError,
        ErrorReason::Transport,
        ErrorReason::Decode,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// A synced watch whose last error is this old, with none since, counts as
/// up again. kube's watcher resumes a broken watch from its last
/// resourceVersion without a relist, so nothing else says it recovered in a
/// quiet cluster; a watch that keeps failing errors at least every 30 s (the
/// backoff's ceiling).
pub const QUIET_AFTER_ERROR: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Default)]
struct ScopeState {
    synced: bool,
    healthy: bool,
    last_error_at: Option<Instant>,
    /// The first list finished, or failed in a way retries will not fix
    /// soon (a missing CRD, missing RBAC): readiness stops waiting for it.
    settled: bool,
    last_reason: Option<ErrorReason>,
}

/// Health of every watch, one entry per (resource, namespace scope).
#[derive(Debug, Default)]
pub struct Health {
    scopes: Mutex<HashMap<(Resource, String), ScopeState>>,
    events: [AtomicU64; 7],
    errors: Mutex<HashMap<(Resource, ErrorReason), u64>>,
    pod_reads: [AtomicU64; 3],
}

fn slot(r: Resource) -> usize {
    Resource::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

impl Health {
    /// A new, empty health registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a watch so it counts for readiness before its first event.
    pub fn register(&self, resource: Resource, scope: &str) {
        if let Ok(mut s) = self.scopes.lock() {
            s.entry((resource, scope.to_string())).or_default();
        }
    }

    /// Counts one watch event.
    pub fn on_event(&self, resource: Resource) {
        self.events[slot(resource)].fetch_add(1, Ordering::Relaxed);
    }

    /// A change arrived on an established watch: a synced watch that failed
    /// before is flowing again.
    pub fn on_flow(&self, resource: Resource, scope: &str) {
        let Ok(mut s) = self.scopes.lock() else {
            return;
        };
        if let Some(st) = s.get_mut(&(resource, scope.to_string())) {
            if st.synced && !st.healthy {
                st.healthy = true;
                st.last_reason = None;
            }
        }
    }

    /// Marks a watch synced and healthy; returns true when it was not before.
    pub fn on_synced(&self, resource: Resource, scope: &str) -> bool {
        let Ok(mut s) = self.scopes.lock() else {
            return false;
        };
        let st = s.entry((resource, scope.to_string())).or_default();
        let changed = !st.healthy;
        st.synced = true;
        st.healthy = true;
        st.settled = true;
        st.last_reason = None;
        changed
    }

    /// Records a watch error; returns true when the watch was healthy before
    /// or failed for another reason (so the caller logs once per episode).
    pub fn on_error(&self, resource: Resource, scope: &str, reason: ErrorReason) -> bool {
        if let Ok(mut e) = self.errors.lock() {
            *e.entry((resource, reason)).or_default() += 1;
        }
        let Ok(mut s) = self.scopes.lock() else {
            return true;
        };
        let st = s.entry((resource, scope.to_string())).or_default();
        let first = st.healthy || st.last_reason != Some(reason);
        st.healthy = false;
        st.last_error_at = Some(Instant::now());
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
    }

    /// Counts one live pod read.
    pub fn on_pod_read(&self, result: ReadResult) {
        let i = ReadResult::ALL
            .iter()
            .position(|r| *r == result)
            .unwrap_or(0);
        self.pod_reads[i].fetch_add(1, Ordering::Relaxed);
    }

    /// True while every scope of `resource` is synced and healthy. A
    /// resource with no watch (not configured) is not up.
    pub fn watch_up(&self, resource: Resource) -> bool {
        self.watch_up_at(resource, Instant::now())
    }

    /// [`Health::watch_up`] at `now`: a synced scope whose last error is
    /// older than [`QUIET_AFTER_ERROR`] counts as healthy again.
    pub fn watch_up_at(&self, resource: Resource, now: Instant) -> bool {
        let Ok(s) = self.scopes.lock() else {
            return false;
        };
        let mut any = false;
        for ((r, _), st) in s.iter() {
            if *r == resource {
                any = true;
                let quiet = st
                    .last_error_at
                    .is_some_and(|t| now.saturating_duration_since(t) >= QUIET_AFTER_ERROR);
                if !(st.synced && (st.healthy || quiet)) {
                    return false;
                }
            }
        }
        any
    }

    /// True when `resource` is watched at all.
    pub fn is_watched(&self, resource: Resource) -> bool {
        self.scopes
            .lock()
            .map(|s| s.keys().any(|(r, _)| *r == resource))
            .unwrap_or(false)
    }

    /// Ready once every watch has finished its first list, or has settled
    /// on an error a retry will not fix soon (reported via watch_up 0).
    pub fn ready(&self) -> bool {
        self.scopes
            .lock()
            .map(|s| !s.is_empty() && s.values().all(|st| st.settled))
            .unwrap_or(false)
    }

    /// Watch events seen for `resource`.
    pub fn events(&self, resource: Resource) -> u64 {
        self.events[slot(resource)].load(Ordering::Relaxed)
    }

    /// Watch errors seen for `resource` with `reason`.
    pub fn errors(&self, resource: Resource, reason: ErrorReason) -> u64 {
        self.errors
            .lock()
            .ok()
            .and_then(|e| e.get(&(resource, reason)).copied())
            .unwrap_or(0)
    }

    /// Live pod reads with `result`.
    pub fn pod_reads(&self, result: ReadResult) -> u64 {
        let i = ReadResult::ALL
            .iter()
            .position(|r| *r == result)
            .unwrap_or(0);
        self.pod_reads[i].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_watch_counts_as_up_again() {
        let h = Health::new();
        let r = Resource::Leases;
        h.register(r, "");
        assert!(!h.watch_up(r), "not up before the first list");
        assert!(!h.ready());
        h.on_synced(r, "");
        assert!(h.watch_up(r) && h.ready());
        assert!(
            h.on_error(r, "", ErrorReason::Transport),
            "the first error of an episode is logged"
        );
        assert!(
            !h.on_error(r, "", ErrorReason::Transport),
            "repeats are not"
        );
        assert!(!h.watch_up(r));
        // Quiet since the error: the watcher resumed without a relist.
        let later = Instant::now() + QUIET_AFTER_ERROR + Duration::from_secs(1);
        assert!(h.watch_up_at(r, later));
        // Or a change flows on the resumed watch.
        h.on_flow(r, "");
        assert!(h.watch_up(r));
        assert_eq!(h.errors(r, ErrorReason::Transport), 2);
    }

    #[test]
    fn a_watch_that_never_listed_is_never_up_but_settles_readiness_on_404_and_403() {
        let h = Health::new();
        h.register(Resource::TerraformMachinePools, "");
        h.register(Resource::Pods, "");
        h.register(Resource::Leases, "");
        h.on_synced(Resource::Leases, "");
        h.on_error(Resource::TerraformMachinePools, "", ErrorReason::NotFound);
        assert!(!h.ready(), "pods have not listed yet");
        h.on_error(Resource::Pods, "", ErrorReason::ServerError);
        assert!(!h.ready(), "a 500 is worth waiting for");
        h.on_error(Resource::Pods, "", ErrorReason::Forbidden);
        assert!(h.ready());
        let later = Instant::now() + QUIET_AFTER_ERROR * 2;
        assert!(
            !h.watch_up_at(Resource::TerraformMachinePools, later),
            "never synced"
        );
        h.on_flow(Resource::Pods, "");
        assert!(
            !h.watch_up(Resource::Pods),
            "flow without a first list is not up"
        );
    }
}
