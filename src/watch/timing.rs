//! The time limits of a watch ([`Timing`]) and the pauses between its
//! attempts ([`Backoff`]).
//!
//! Apart from the loop in [`super::list_watch`] because they are plain
//! arithmetic over durations: no request, no health, no index, and their
//! bounds (how soon a hung API is noticed, how watches spread out) are
//! tested here without running a watch.

use std::time::Duration;

use crate::health::ErrorReason;

/// Time limits of the loop. [`Timing::DEFAULT`] is what production uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The longest a list page or a watch start may take to answer, and
    /// the longest silence between two initial events of a streaming
    /// watch-list.
    pub request: Duration,
    /// The least `timeoutSeconds` asked of the server for a watch; each
    /// watch asks for a random time between this and twice it, as
    /// client-go's reflector does (5-10 min), so that watches started
    /// together do not end together.
    pub watch_timeout: Duration,
    /// A watch that delivers neither an event nor a bookmark for this long
    /// is restarted: kube-apiserver sends a bookmark on every watch about
    /// once a minute, so a silent one sits on a dead connection or a hung
    /// server.
    pub silence: Duration,
    /// How long past its own timeout a watch is kept when the silence limit
    /// does not apply (see `follow::silence_limit`).
    pub timeout_margin: Duration,
    /// A scope marked for a relist (an undecodable event) is relisted at
    /// the latest this long after the mark, ending its watch if need be.
    pub relist_within: Duration,
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
    /// `silence + request` = 95 s; a watch at rest is re-opened every
    /// 5-10 min.
    pub const DEFAULT: Timing = Timing {
        request: Duration::from_secs(20),
        watch_timeout: Duration::from_secs(300),
        silence: Duration::from_secs(75),
        timeout_margin: Duration::from_secs(15),
        relist_within: Duration::from_secs(60),
        backoff_min: Duration::from_secs(1),
        backoff_max: Duration::from_secs(8),
        backoff_max_config: Duration::from_secs(30),
        page_size: 500,
        watch_min_interval: Duration::from_secs(1),
    };
}

/// Exponential backoff with jitter, reset by a success.
#[derive(Debug)]
pub(super) struct Backoff {
    timing: Timing,
    failures: u32,
    seed: u64,
}

impl Backoff {
    /// No failure yet; the jitter seeded from the clock.
    pub(super) fn new(timing: Timing) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.subsec_nanos() as u64 | 1);
        Backoff {
            timing,
            failures: 0,
            seed,
        }
    }

    /// A success: the next failure pauses the least again.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }

    fn random(&mut self) -> u64 {
        // xorshift64: jitter needs no cryptographic quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }

    /// A watch's `timeoutSeconds`: uniform in [min, 2 min).
    pub(super) fn watch_seconds(&mut self) -> u32 {
        let min = self.timing.watch_timeout.as_secs().max(1);
        let secs = min + self.random() % min;
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// The pause before the next attempt: min * 2^failures, capped, then
    /// 80..100 % of that so watches that failed together spread out. A
    /// 401 backs off as a transient failure: a rotated token is fixed by
    /// the next read of the token file, not by a person.
    pub(super) fn next(&mut self, reason: ErrorReason) -> Duration {
        let cap = match reason {
            ErrorReason::NotFound | ErrorReason::Forbidden => self.timing.backoff_max_config,
            _ => self.timing.backoff_max,
        };
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = self.timing.backoff_min.saturating_mul(1 << exp).min(cap);
        let pct = 80 + (self.random() % 21) as u32;
        base * pct / 100
    }
}

#[cfg(test)]
mod tests;
