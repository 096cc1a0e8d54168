//! The newest snapshot, shared by every scrape: a scrape never renders and
//! waits only for the very first snapshot (and, for gzip, the first one
//! compressed). Nothing is rendered before the first scrape.
//!
//! [`ScrapeCache::refresh`], run beside the accept loop by the server's
//! task, keeps it current: on every index change it renders again the
//! buckets of the keys the index names and publishes a new snapshot,
//! compressed once some scrape asked for gzip. Sample lines are the same
//! in both text formats, so one store serves both; a scrape adds the
//! family headers of its format and a health part rendered for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use super::body::{gzip_head, Body};
use super::store::{Snapshot, Store};
use super::{families, Exposition, Format};
use crate::index::Changes;
use crate::shared::Shared;

/// How often lock ages move (with `--export-lock-age`, every held lock's
/// age series is rendered again this often).
pub const AGES_EVERY: Duration = Duration::from_secs(1);

/// The most a moved health value (a counter, a last success) waits to be
/// shown: while pod reads settle or events stream, every scrape would
/// otherwise render the health part and its gzip body again.
pub const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// How long a change waits for others before it is rendered, so that a
/// burst (a relist, pod reads settling) costs one render, not one each.
pub const GATHER: Duration = Duration::from_millis(50);

/// Why a scrape got no body.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The encoder failed.
    #[error("encoding the exposition failed")]
    Encode,
    /// The cache is gone.
    #[error("the exposition is not being rendered")]
    Task,
}

/// What the last scrape of a format was sent: the health part (rendered
/// again for a new snapshot, or when a health value moved, at most once
/// per [`HEALTH_EVERY`]) and the gzip body made from it.
#[derive(Debug)]
struct Last {
    /// The health generation the part is at least as new as.
    generation: u64,
    /// When it was rendered.
    at: Instant,
    /// The snapshot it was rendered with, and the gzip body is of.
    of: Weak<Snapshot>,
    health: Bytes,
    gzip: Option<Body>,
}

/// The newest snapshot of the index's series.
#[derive(Debug)]
pub struct ScrapeCache {
    shared: Arc<Shared>,
    exposition: Exposition,
    snapshot: watch::Sender<Option<Arc<Snapshot>>>,
    /// Some scrape came: the refresher renders from then on, so that the
    /// first render, after the watches listed, is whole.
    wanted: AtomicBool,
    /// Some scrape asked for gzip: snapshots are compressed from then on.
    gzip_wanted: AtomicBool,
    /// Wakes the refresher when a scrape or gzip is first wanted.
    wake: Notify,
    /// Per format what the last scrape was sent.
    last: [Mutex<Option<Last>>; 2],
    renders: AtomicU64,
    compressions: AtomicU64,
}

impl ScrapeCache {
    /// A cache over `shared` with the default families; bodies appear once
    /// [`ScrapeCache::refresh`] runs.
    pub fn new(shared: Arc<Shared>) -> Arc<ScrapeCache> {
        Self::with_exposition(shared, Exposition::default())
    }

    /// A cache that also renders the optional families of `exposition`.
    pub fn with_exposition(shared: Arc<Shared>, exposition: Exposition) -> Arc<ScrapeCache> {
        Arc::new(ScrapeCache {
            shared,
            exposition,
            snapshot: watch::channel(None).0,
            wanted: AtomicBool::new(false),
            gzip_wanted: AtomicBool::new(false),
            wake: Notify::new(),
            last: Default::default(),
            renders: AtomicU64::new(0),
            compressions: AtomicU64::new(0),
        })
    }

    /// How many store updates rendered some bucket.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// How many store updates compressed some bucket.
    pub fn compressions(&self) -> u64 {
        self.compressions.load(Ordering::Relaxed)
    }

    /// The newest body of `format`, gzip-compressed when `gzip`.
    pub async fn body(&self, format: Format, gzip: bool) -> Result<Body, ScrapeError> {
        let first = !self.wanted.swap(true, Ordering::AcqRel);
        if first | (gzip && !self.gzip_wanted.swap(true, Ordering::AcqRel)) {
            self.wake.notify_one();
        }
        let mut rx = self.snapshot.subscribe();
        let ready = |s: &Option<Arc<Snapshot>>| s.as_ref().is_some_and(|s| !gzip || s.has_gzip());
        let snapshot = rx
            .wait_for(ready)
            .await
            .map_err(|_| ScrapeError::Task)?
            .clone()
            .ok_or(ScrapeError::Task)?;
        let slot = &self.last[usize::from(format == Format::Prometheus)];
        let mut last = slot.lock().unwrap_or_else(PoisonError::into_inner);
        // Read before the render: a value that moves during it renders
        // again at the next scrape, never the other way round.
        let generation = self.shared.health.generation();
        let this = Arc::downgrade(&snapshot);
        // A new snapshot gets health as it is now, so that a class change
        // and the counters that explain it come in one scrape.
        let fresh_enough = |l: &Last| l.at.elapsed() < HEALTH_EVERY && l.of.ptr_eq(&this);
        let last = match last.as_mut() {
            Some(l) if l.generation == generation || fresh_enough(l) => l,
            _ => {
                let health = families::health(&self.shared.health, format);
                let health = Bytes::from(health.map_err(|_| ScrapeError::Encode)?);
                last.insert(Last {
                    generation,
                    at: Instant::now(),
                    of: this.clone(),
                    health,
                    gzip: None,
                })
            }
        };
        if !gzip {
            return Ok(Body::plain(&snapshot, format, last.health.clone()));
        }
        if let Some(body) = last.gzip.as_ref().filter(|_| last.of.ptr_eq(&this)) {
            return Ok(body.clone());
        }
        let body = Body::gzip(&snapshot, format, &last.health).ok_or(ScrapeError::Encode)?;
        last.of = this;
        last.gzip = Some(body.clone());
        Ok(body)
    }

    /// Keeps the snapshot current; returns only when the index's change
    /// feed is gone. Run it beside the scrapes (the server does).
    pub async fn refresh(self: Arc<Self>) {
        let mut generation = self.shared.subscribe();
        let changes = self.shared.changes();
        let mut store = Store::new(self.exposition);
        let mut ages = tokio::time::interval(AGES_EVERY);
        ages.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.wanted.load(Ordering::Acquire) {
            self.wake.notified().await;
        }
        loop {
            let noted = match changes.lock() {
                Ok(mut c) => c.take(),
                Err(poisoned) => poisoned.into_inner().take(),
            };
            let gzip = self.gzip_wanted.load(Ordering::Acquire);
            store.note(&noted);
            if !store.is_current(gzip) {
                let shared = self.shared.clone();
                let (done, snapshot);
                (store, done, snapshot) = blocking(move || {
                    let mut store = store;
                    let done = store.update(&shared, SystemTime::now(), gzip);
                    let snapshot = store.snapshot();
                    if gzip {
                        for format in [Format::OpenMetrics, Format::Prometheus] {
                            gzip_head(&snapshot, format);
                        }
                    }
                    (store, done, snapshot)
                })
                .await;
                self.renders
                    .fetch_add(u64::from(done.buckets > 0), Ordering::Relaxed);
                let compressed = u64::from(done.compressed > 0);
                self.compressions.fetch_add(compressed, Ordering::Relaxed);
                self.snapshot.send_replace(Some(Arc::new(snapshot)));
            }
            tokio::select! {
                changed = generation.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    tokio::time::sleep(GATHER).await;
                }
                () = self.wake.notified() => {}
                _ = ages.tick(), if self.exposition.lock_age => {
                    // Ages move with the clock: every lock is drawn again.
                    store.note(&Changes::everything());
                }
            }
        }
    }
}

/// Runs `f` off the reactor; a panic in it goes on in the caller's task
/// (the server's, whose supervisor ends the process).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled only when the runtime shuts down.
            Err(_) => std::future::pending().await,
        },
    }
}
