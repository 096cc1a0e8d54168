//! The state shared by watchers, pod reads and the HTTP server: the index
//! behind one lock and the fan-out of its changes, watch health, and the
//! queue of pods to read. What only
//! the watches and pod reads share (the API link, watch-list support, the
//! wire format) is `crate::watch::Context`, not here.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::health::Health;
use crate::index::{Changes, ClassChange, Effects, Index, ObjectKey};

/// State shared by every task of the exporter.
#[derive(Debug)]
pub struct Shared {
    /// The index; writers hold the lock only to apply a change. Use
    /// [`Shared::read`] and [`Shared::update`], which also recover the
    /// index from a poisoned lock the one way.
    index: RwLock<Index>,
    /// Who hears of the index's changes.
    feed: ChangeFeed,
    /// Watch health and self-metrics.
    pub health: Arc<Health>,
    /// Holder pods to confirm with a live read.
    pub pod_reads: mpsc::UnboundedSender<ObjectKey>,
}

/// The index's change fan-out, filled under its write lock.
#[derive(Debug)]
struct ChangeFeed {
    /// Bumped after every write of the index that changed what `/metrics`
    /// shows, so that a renderer knows whether it is current without
    /// reading the index, and can wait for the next change.
    generation: tokio::sync::watch::Sender<u64>,
    /// Where each renderer collects which lock keys changed (one per
    /// [`Shared::changes`] caller).
    sinks: Mutex<Vec<Weak<Mutex<Changes>>>>,
    /// Woken when a write moves the index's next deadline earlier
    /// (`Index::take_clock_moved`), so the deadlines' task can sleep until
    /// that deadline instead of polling.
    clock: tokio::sync::Notify,
}

impl Shared {
    /// New shared state and the receiving end of the confirmation queue.
    pub fn new() -> (Arc<Shared>, mpsc::UnboundedReceiver<ObjectKey>) {
        let (pod_reads, confirm_rx) = mpsc::unbounded_channel();
        let shared = Shared {
            index: RwLock::new(Index::new()),
            feed: ChangeFeed {
                generation: tokio::sync::watch::channel(0).0,
                sinks: Mutex::new(Vec::new()),
                clock: tokio::sync::Notify::new(),
            },
            health: Arc::new(Health::new()),
            pod_reads,
        };
        (Arc::new(shared), confirm_rx)
    }

    /// Runs `f` on the index under the write lock and acts on its effects.
    pub fn update(&self, f: impl FnOnce(&mut Index, SystemTime) -> Effects) {
        let fx = self.write(f);
        self.act(fx);
    }

    /// Runs `f` on the index under the write lock and returns its result.
    /// A panic while the lock was held leaves the index as it was, half
    /// applied change at worst; the supervisor ends the process on a
    /// panicking task, so carrying on here only serves the last scrapes.
    /// The exposition is marked out of date only when the index says
    /// something it shows changed (`Index::take_changes`), so bookkeeping
    /// writes (which overdue warnings were logged, which old reads to drop)
    /// cost no render.
    pub fn write<T>(&self, f: impl FnOnce(&mut Index, SystemTime) -> T) -> T {
        let now = SystemTime::now();
        let mut index = match self.index.write() {
            Ok(index) => index,
            Err(poisoned) => poisoned.into_inner(),
        };
        let out = f(&mut index, now);
        if index.take_clock_moved() {
            // A stored permit: a checker between two waits still sees it.
            self.feed.clock.notify_one();
        }
        let changes = index.take_changes();
        if !changes.is_empty() {
            // Handed on and bumped before the lock is released: a reader
            // holding the read lock has every change it can see in its
            // sink, and none it cannot.
            self.hand_on(&changes);
            self.feed.generation.send_modify(|g| *g += 1);
        }
        out
    }

    /// A sink that collects every lock key whose series change from now
    /// on; it starts as "everything" (its owner has drawn nothing yet).
    pub fn changes(&self) -> Arc<Mutex<Changes>> {
        let sink = Arc::new(Mutex::new(Changes::everything()));
        let mut sinks = match self.feed.sinks.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        sinks.retain(|s| s.strong_count() > 0);
        sinks.push(Arc::downgrade(&sink));
        sink
    }

    fn hand_on(&self, changes: &Changes) {
        let sinks = match self.feed.sinks.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        for sink in sinks.iter().filter_map(Weak::upgrade) {
            match sink.lock() {
                Ok(mut s) => s.merge(changes),
                Err(poisoned) => poisoned.into_inner().merge(changes),
            }
        }
    }

    /// Completes after a write moved the next clock deadline earlier (at
    /// once when one did since the last wait). One waiter: the clock's
    /// checker.
    pub async fn clock_moved(&self) {
        self.feed.clock.notified().await;
    }

    /// A receiver that sees every write changing what `/metrics` shows.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.feed.generation.subscribe()
    }

    /// Runs `f` on the index under the read lock.
    pub fn read<T>(&self, f: impl FnOnce(&Index) -> T) -> T {
        match self.index.read() {
            Ok(index) => f(&index),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// Logs class changes and queues live reads.
    pub fn act(&self, fx: Effects) {
        for c in &fx.class_changes {
            log_class_change(c);
        }
        for pod in fx.confirm {
            // The receiver lives as long as the process; a send error only
            // happens during shutdown.
            let _ = self.pod_reads.send(pod);
        }
    }
}

fn log_class_change(c: &ClassChange) {
    let from = c.from.map_or("released", |x| x.as_str());
    let to = c.to.map_or("released", |x| x.as_str());
    tracing::info!(
        namespace = %c.namespace,
        kind = c.kind,
        name = %c.name,
        from,
        to,
        holder = %c.holder.escape_debug(),
        age_seconds = c.age_seconds.map(|a| a.round()),
        "state lock holder class changed"
    );
}
