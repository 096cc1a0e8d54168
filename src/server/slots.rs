//! Fair connection slots: at the cap, a connection that is not using its
//! slot gives it to the newcomer.
//!
//! A cap alone lets whoever opens connections first keep them: 256 clients
//! that send `GET /metrics` and never read (or never finish a TLS
//! handshake) would hold every slot until their deadlines, and a real
//! scrape would wait in the listen backlog behind them. So does a cap with
//! "the stillest connection goes": 128 keep-alive clients that each ask for
//! `/healthz` every 0.8 s are never still, and the probes and scrapes that
//! come next wait in the backlog.
//!
//! A connection is using its slot only while a response is owed on it (a
//! request head has been read and its answer is not all written), that
//! answer is to a protected path the guard let in (a scrape or a page, not
//! a probe's answer or a refusal, which are a few hundred bytes), and it
//! moves: bytes written within `stalled_after`. Everything else may
//! be closed at the cap: a connection owed an answer that has not moved for
//! `stalled_after` (a client that stopped reading), and a connection owed
//! nothing (between requests on keep-alive, in a TLS handshake, sending a
//! head) once it has been open for `stalled_after`, which leaves a new
//! connection the time to say what it wants. Closing a connection owed
//! nothing loses no work: an HTTP client retries a request on a fresh
//! connection when an idle keep-alive one is closed.
//!
//! Of the connections that may be closed, the one closed is, in order: one
//! that never sent a request head (a handshake or a head being trickled),
//! then one that never made a request the API server's review allowed,
//! then one that did; within each, one owed nothing before one whose answer
//! stalled; then the one whose last progress is oldest. A reviewed caller
//! (Prometheus, between scrapes on its keep-alive connection) thus keeps
//! its connection while anonymous ones can give theirs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::deadline::ResponseClock;
use super::observed::Observer;

/// The open connections and what each is doing.
#[derive(Debug)]
pub(super) struct Slots {
    epoch: Instant,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    evicted: AtomicU64,
}

/// How far a connection has come; higher keeps its slot longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Standing {
    /// No request head read yet (TLS handshake, or a head on its way).
    Opened = 0,
    /// A request head was read; none was allowed by a review.
    Asked = 1,
    /// A request on it was allowed by the API server's review.
    Reviewed = 2,
}

/// One open connection as the slots see it.
#[derive(Debug)]
pub(super) struct Conn {
    epoch: Instant,
    /// Milliseconds since the epoch of the accept.
    accepted: u64,
    /// Milliseconds since the epoch of the last progress: the accept, a
    /// request head read, bytes written. Bytes read are not progress: a
    /// client trickling a handshake or a head would otherwise look busy.
    last: AtomicU64,
    standing: AtomicU8,
    /// Whether the answer owed now is to a protected path the guard let in
    /// (a scrape, a page): only such an answer keeps the slot while it
    /// moves. A probe's answer or a refusal does not, or a client that
    /// pipelines `/healthz` and reads a few hundred bytes a second would
    /// always be owed an answer that moves.
    guarded: AtomicBool,
    /// The connection's response deadline: whether an answer is owed.
    clock: OnceLock<Arc<ResponseClock>>,
    evict: Notify,
    /// Told when its answer holds a body too many renders old (see
    /// [`super::pins`]).
    cut: Notify,
    #[cfg(test)]
    was_cut: std::sync::atomic::AtomicBool,
}

impl Conn {
    fn touch(&self) {
        self.last.store(millis(self.epoch), Ordering::Relaxed);
    }

    fn rise(&self, to: Standing) {
        self.standing.fetch_max(to as u8, Ordering::Relaxed);
    }

    /// A request head was read: an answer is owed from now.
    pub(super) fn asked(&self) {
        self.touch();
        self.rise(Standing::Asked);
        self.guarded.store(false, Ordering::Relaxed);
    }

    /// The answer owed now is to a protected path the guard let in.
    pub(super) fn let_in(&self) {
        self.guarded.store(true, Ordering::Relaxed);
    }

    /// A request on this connection was allowed by a review.
    pub(super) fn reviewed(&self) {
        self.rise(Standing::Reviewed);
    }

    /// The clock that says whether an answer is owed (set once HTTP starts,
    /// after the TLS handshake).
    pub(super) fn answers_by(&self, clock: Arc<ResponseClock>) {
        let _ = self.clock.set(clock);
    }

    fn owes(&self) -> bool {
        self.clock.get().is_some_and(|c| c.owes())
    }

    /// When this connection may be closed at the cap: None while it uses its
    /// slot; else its place in the order (lowest closed first).
    fn eviction_key(&self, now: u64, limit: u64) -> Option<(u8, bool, u64)> {
        let last = self.last.load(Ordering::Relaxed);
        let owes = self.owes();
        // An answer that is not a let-in one counts as owing nothing: the
        // connection may go once it has been open for `limit`.
        let guarded = owes && self.guarded.load(Ordering::Relaxed);
        let since = if guarded { last } else { self.accepted };
        (now.saturating_sub(since) >= limit)
            .then(|| (self.standing.load(Ordering::Relaxed), owes, last))
    }

    /// Resolves when the slots take this connection's slot back.
    pub(super) async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// Closes the connection: its answer keeps a superseded body.
    pub(super) fn cut(&self) {
        #[cfg(test)]
        self.was_cut.store(true, Ordering::Relaxed);
        // notify_one keeps a permit, as for an eviction.
        self.cut.notify_one();
    }

    /// Resolves when [`Conn::cut`] was called.
    pub(super) async fn cut_off(&self) {
        self.cut.notified().await;
    }

    #[cfg(test)]
    pub(super) fn is_cut(&self) -> bool {
        self.was_cut.load(Ordering::Relaxed)
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(Instant::now().saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

/// Removes the connection from the slots when its task ends.
#[derive(Debug)]
pub(super) struct Registered {
    slots: Arc<Slots>,
    id: u64,
    pub(super) conn: Arc<Conn>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

impl Slots {
    pub(super) fn new() -> Arc<Slots> {
        Arc::new(Slots {
            epoch: Instant::now(),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        match self.open.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A connection just accepted: it counts as progress.
    pub(super) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = millis(self.epoch);
        let conn = Arc::new(Conn {
            epoch: self.epoch,
            accepted: now,
            last: AtomicU64::new(now),
            standing: AtomicU8::new(Standing::Opened as u8),
            guarded: AtomicBool::new(false),
            clock: OnceLock::new(),
            evict: Notify::new(),
            cut: Notify::new(),
            #[cfg(test)]
            was_cut: std::sync::atomic::AtomicBool::new(false),
        });
        self.lock().insert(id, conn.clone());
        Registered {
            slots: self.clone(),
            id,
            conn,
        }
    }

    /// Closes the first connection in the eviction order (see the module
    /// documentation), if any may be closed; true when one was told to.
    pub(super) fn evict_stalest(&self, stalled_after: Duration) -> bool {
        let now = millis(self.epoch);
        let limit = u64::try_from(stalled_after.as_millis()).unwrap_or(u64::MAX);
        let mut open = self.lock();
        let victim = open
            .iter()
            .filter_map(|(id, c)| Some((c.eviction_key(now, limit)?, *id)))
            .min()
            .map(|(_, id)| id);
        let Some(id) = victim.and_then(|id| open.remove(&id).map(|c| (id, c))) else {
            return false;
        };
        // notify_one keeps a permit: the connection sees it even if it is
        // not waiting at this moment.
        id.1.evict.notify_one();
        self.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Connections closed to make room so far.
    #[cfg(test)]
    pub(super) fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

/// A socket tells its [`Conn`] whenever bytes are written to it.
impl Observer for Arc<Conn> {
    fn wrote(&self) {
        self.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STILL: Duration = Duration::from_secs(1);

    /// An answer owed on `r` to a request the guard let into a protected
    /// path (a scrape); `let_in` false: a probe's answer or a refusal.
    fn owed_as(r: &Registered, let_in: bool) -> super::super::deadline::BodyGuard {
        let clock = Arc::new(ResponseClock::new(Duration::from_secs(30)));
        r.conn.answers_by(clock.clone());
        r.conn.asked();
        if let_in {
            r.conn.let_in();
        }
        clock.start()
    }

    fn owed(r: &Registered) -> super::super::deadline::BodyGuard {
        owed_as(r, true)
    }

    /// A client that pipelines `/healthz` and reads a
    /// little every 0.9 s is always owed a probe's answer that moves; that
    /// must not keep its slot, or 128 of them keep everyone out.
    #[tokio::test(start_paused = true)]
    async fn a_moving_probe_answer_does_not_keep_its_slot() {
        let slots = Slots::new();
        let pipeliner = slots.register();
        let _probe = owed_as(&pipeliner, false);
        let scraper = slots.register();
        let _scrape = owed(&scraper);
        tokio::time::advance(Duration::from_millis(1100)).await;
        pipeliner.conn.touch();
        scraper.conn.touch();
        // Both answers moved just now; only the scrape's holds its slot.
        assert!(slots.evict_stalest(STILL));
        assert!(told(&pipeliner).await);
        assert!(!told(&scraper).await);
        assert!(!slots.evict_stalest(STILL));
    }

    async fn told(r: &Registered) -> bool {
        tokio::time::timeout(Duration::from_millis(1), r.conn.evicted())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_moves_and_a_new_connection_keep_their_slots() {
        let slots = Slots::new();
        let writing = slots.register();
        let _answer = owed(&writing);
        tokio::time::advance(Duration::from_millis(500)).await;
        let fresh = slots.register();
        tokio::time::advance(Duration::from_millis(700)).await;
        writing.conn.touch();
        // The answer moved 0 s ago, the new one is 0.7 s old.
        assert!(!slots.evict_stalest(STILL));
        tokio::time::advance(Duration::from_millis(400)).await;
        // Now the new one has been open for 1.1 s owing nothing.
        assert!(slots.evict_stalest(STILL));
        assert!(told(&fresh).await);
        assert!(!told(&writing).await);
        // The answer stalls: after a second it may go too.
        tokio::time::advance(Duration::from_millis(300)).await;
        assert!(!slots.evict_stalest(STILL));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(slots.evict_stalest(STILL));
        assert!(told(&writing).await);
        assert_eq!(slots.evictions(), 2);
        drop(fresh);
        drop(writing);
        assert!(
            slots.lock().is_empty(),
            "a closed connection leaves the slots"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn handshakes_go_first_then_anonymous_then_reviewed_callers() {
        let slots = Slots::new();
        // Prometheus: reviewed, idle between scrapes for a long time.
        let scraper = slots.register();
        drop(owed(&scraper));
        scraper.conn.reviewed();
        if let Some(c) = scraper.conn.clock.get() {
            // Its answer was written whole.
            c.flushed();
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        // A chatty client answered a moment ago, one that stopped reading,
        // and a handshake that trickles in.
        let chatty = slots.register();
        chatty.conn.asked();
        let stuck = slots.register();
        let _stuck_answer = owed(&stuck);
        let handshake = slots.register();
        tokio::time::advance(Duration::from_secs(2)).await;
        chatty.conn.touch();
        let order = [&handshake, &chatty, &stuck, &scraper];
        for (i, r) in order.iter().enumerate() {
            assert!(slots.evict_stalest(STILL), "eviction {i}");
            assert!(told(r).await, "eviction {i} took another connection");
        }
        assert!(!slots.evict_stalest(STILL), "nobody left");
    }
}
