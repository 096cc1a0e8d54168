//! TLS handshakes that fail, summed up for every client at once.
//!
//! A Prometheus that does not trust the certificate fails a handshake at
//! every scrape, a client speaking plain HTTP to the HTTPS port at every
//! request, a port scanner or a TCP health check at every connection. A
//! line each would fill the log with one cause, at whatever rate a client
//! chooses; so the connections only count, and one line per
//! [`Handshakes::EVERY`] says how many failed since the last and the last
//! cause.

use std::sync::Mutex;
use std::time::Duration;

/// Failed handshakes since the last summary.
#[derive(Debug, Default)]
pub(super) struct Handshakes {
    since: Mutex<Failed>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Failed {
    /// Refused by rustls (not TLS, no shared version or cipher, an alert
    /// from the client, the connection closed mid-handshake).
    failed: u64,
    /// Not finished within the header timeout.
    timed_out: u64,
    /// The last refusal, as rustls words it (no client data in it).
    last: Option<String>,
}

impl Handshakes {
    /// How often a summary may be logged.
    pub(super) const EVERY: Duration = Duration::from_secs(60);

    fn with<T>(&self, f: impl FnOnce(&mut Failed) -> T) -> T {
        match self.since.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// A handshake rustls refused.
    pub(super) fn failed(&self, err: &std::io::Error) {
        let cause = err.to_string();
        self.with(|s| {
            s.failed += 1;
            s.last = Some(cause);
        });
    }

    /// A handshake not finished in time.
    pub(super) fn timed_out(&self) {
        self.with(|s| s.timed_out += 1);
    }

    /// Logs what failed since the last summary, if anything.
    pub(super) fn summarize(&self) {
        let since = self.with(std::mem::take);
        if since == Failed::default() {
            return;
        }
        tracing::info!(
            failed = since.failed,
            timed_out = since.timed_out,
            last_error = since.last.as_deref().unwrap_or("none"),
            every = ?Self::EVERY,
            "TLS handshakes failed since the last summary (a client that does not trust the certificate or speaks plain HTTP, a scanner, a TCP health check)"
        );
    }

    /// Summarizes every [`Handshakes::EVERY`]; never returns.
    pub(super) async fn summaries(&self) {
        let mut every = tokio::time::interval(Self::EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            self.summarize();
        }
    }
}
