//! What the tasks that talk to the API server share about the connection:
//! the server's last `Retry-After`, and the switch that drops pooled
//! connections after a request timed out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// Longest `Retry-After` honoured. A server that asks for more is obeyed
/// for this long, then asked again: an exporter that waited ten minutes
/// on one answer would serve stale data without a sign for that long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Least time between two resets of the connection pool: a hung server
/// times out every request at once, and one fresh pool serves them all.
const MIN_RESET_INTERVAL: Duration = Duration::from_secs(1);

/// Shared state about the connection to the API server.
#[derive(Default)]
pub struct ApiLink {
    throttle: Mutex<Throttle>,
    reset: OnceLock<Box<dyn Fn() + Send + Sync>>,
    last_reset: Mutex<Option<Instant>>,
    /// The last answer came over HTTP/2, whose connections are pinged
    /// (false until an answer says so).
    pinged: AtomicBool,
    reach: Mutex<Reach>,
}

/// Whether the API server could be reached, to tell a server that has just
/// come back (and may refuse for a few seconds while its authorizer loads)
/// from one whose RBAC really refuses.
#[derive(Debug, Default)]
struct Reach {
    /// A request failed without any answer, and none came since.
    unreachable: bool,
    /// When the first answer after such a failure came.
    back_at: Option<Instant>,
}

impl std::fmt::Debug for ApiLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiLink")
            .field("throttle", &self.throttle)
            .field("resettable", &self.reset.get().is_some())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Throttle {
    /// Requests wait until then (the last Retry-After).
    until: Option<Instant>,
    /// A throttling episode is on: 429/503 answers without an answer of
    /// another kind since. Logged once when it starts.
    episode: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these; recover the one way if it did.
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ApiLink {
    /// A new link with no reset switch (tests, the demo).
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs the reset switch of the client's connection pool.
    pub fn set_reset(&self, reset: Box<dyn Fn() + Send + Sync>) {
        let _ = self.reset.set(reset);
    }

    /// Drops the pooled connections, so that the next request dials: called
    /// when a request timed out (the connection may be half-open: a load
    /// balancer failed over, a NAT entry expired). Requests in flight keep
    /// their connections until they end. At most once a second.
    pub fn reset_connections(&self) {
        let Some(reset) = self.reset.get() else {
            return;
        };
        {
            let mut last = lock(&self.last_reset);
            let now = Instant::now();
            if last.is_some_and(|t| now.duration_since(t) < MIN_RESET_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        tracing::info!("a request to the API server timed out; new requests use new connections");
        reset();
    }

    /// Records an answer's `Retry-After` (429 or 503), capped at
    /// [`MAX_RETRY_AFTER`]; the first of an episode is logged.
    pub fn note_retry_after(&self, status: u16, wait: Duration) {
        let wait = wait.min(MAX_RETRY_AFTER);
        let mut t = lock(&self.throttle);
        let until = Instant::now() + wait;
        t.until = Some(t.until.map_or(until, |u| u.max(until)));
        if !t.episode {
            t.episode = true;
            tracing::warn!(
                status,
                retry_after_seconds = wait.as_secs_f64(),
                max_seconds = MAX_RETRY_AFTER.as_secs(),
                "the API server asks to retry later; requests wait as long as it asks (logged once until it answers otherwise)"
            );
        }
    }

    /// An answer that is not a throttling one: the episode is over.
    pub fn note_answer(&self) {
        let mut t = lock(&self.throttle);
        if t.episode {
            t.episode = false;
            tracing::info!("the API server answers again without asking to wait");
        }
    }

    /// A request got no answer at all (connection refused, reset, TLS).
    pub fn note_unreachable(&self) {
        lock(&self.reach).unreachable = true;
    }

    /// A request got an answer, whatever its status.
    pub fn note_reached(&self) {
        let mut r = lock(&self.reach);
        if r.unreachable {
            r.unreachable = false;
            r.back_at = Some(Instant::now());
        }
    }

    /// True when the API server answered again, after a time it could not
    /// be reached, less than `within` ago: it has probably just restarted.
    pub fn came_back_within(&self, within: Duration) -> bool {
        lock(&self.reach)
            .back_at
            .is_some_and(|t| t.elapsed() < within)
    }

    /// Notes the HTTP version of an answer.
    pub fn note_version(&self, version: http::Version) {
        self.pinged
            .store(version == http::Version::HTTP_2, Ordering::Relaxed);
    }

    /// True unless the server's last answer came over HTTP/2: HTTP/1.x
    /// connections carry no pings, so a dead or hung one is found only by
    /// the silence of what it carries (and before any answer, or on a
    /// client without this stack, nothing is known).
    pub fn unpinged(&self) -> bool {
        !self.pinged.load(Ordering::Relaxed)
    }

    /// How long requests should still wait, if the server asked.
    pub fn retry_after_remaining(&self) -> Option<Duration> {
        let t = lock(&self.throttle);
        let left = t.until?.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// Parses a `Retry-After` value: delay-seconds, or an HTTP date (which is
/// turned into a delay from `now_unix` seconds). None when unusable.
pub fn parse_retry_after(value: &str, now_unix: f64) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    #[allow(clippy::cast_precision_loss)]
    let delay = at.timestamp() as f64 - now_unix;
    Some(Duration::from_secs_f64(delay.clamp(0.0, 86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_values() {
        assert_eq!(parse_retry_after("20", 0.0), Some(Duration::from_secs(20)));
        assert_eq!(parse_retry_after(" 0 ", 0.0), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", 0.0), None);
        assert_eq!(parse_retry_after("soon", 0.0), None);
        // An HTTP date 30 s after now.
        let now = 1_800_000_000.0;
        assert_eq!(
            parse_retry_after("Fri, 15 Jan 2027 08:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Fri, 15 Jan 2027 07:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past waits nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_is_capped_and_runs_out() {
        let link = ApiLink::new();
        assert_eq!(link.retry_after_remaining(), None);
        link.note_retry_after(429, Duration::from_secs(600));
        assert_eq!(link.retry_after_remaining(), Some(MAX_RETRY_AFTER));
        tokio::time::sleep(MAX_RETRY_AFTER).await;
        assert_eq!(link.retry_after_remaining(), None);
    }

    #[test]
    fn only_http2_answers_count_as_pinged() {
        let link = ApiLink::new();
        assert!(link.unpinged(), "nothing known yet");
        link.note_version(http::Version::HTTP_2);
        assert!(!link.unpinged());
        link.note_version(http::Version::HTTP_11);
        assert!(link.unpinged());
    }

    #[tokio::test(start_paused = true)]
    async fn resets_are_paced() {
        let link = ApiLink::new();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        link.set_reset(Box::new(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        for _ in 0..10 {
            link.reset_connections();
        }
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::sleep(MIN_RESET_INTERVAL).await;
        link.reset_connections();
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
