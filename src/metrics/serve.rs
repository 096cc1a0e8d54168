//! The newest snapshot, shared by every scrape: a scrape never renders the
//! index's series and waits only for the very first snapshot. Nothing is
//! rendered before the watches' first lists or the first scrape.
//!
//! [`ScrapeCache::refresh`], run beside the accept loop by the server's
//! task, keeps it current: on every index change it renders and
//! compresses again the buckets of the keys the index names and publishes
//! a new snapshot. Sample lines are the same in both text formats, so one
//! store serves both; a scrape adds the family headers of its format and
//! the health part, rendered for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use super::body::Body;
use super::store::{Sizing, Snapshot, Store};
use super::{families, Exposition, Format};
use crate::index::Changes;
use crate::shared::Shared;

/// How often lock ages move (with `--export-lock-age`, every held lock's
/// age series is rendered again this often).
pub const AGES_EVERY: Duration = Duration::from_secs(1);

/// The least time between two renders, so that a burst of changes (a
/// relist, pod reads settling) costs one render per this, not one each;
/// a change after a quiet spell is rendered at once.
pub const GATHER: Duration = Duration::from_millis(50);

/// How often the refresher looks whether the watches have listed, before
/// its first render.
const READY_POLL: Duration = Duration::from_millis(20);

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

/// The newest snapshot of the index's series.
#[derive(Debug)]
pub struct ScrapeCache {
    shared: Arc<Shared>,
    exposition: Exposition,
    snapshot: watch::Sender<Option<Arc<Snapshot>>>,
    /// Some scrape came: the refresher renders from then on, so that the
    /// first render, after the watches listed, is whole.
    wanted: AtomicBool,
    /// Wakes the refresher when the first scrape comes.
    wake: Notify,
    /// Per format the health part last rendered, and the health
    /// generation it shows.
    health: [Mutex<Option<(u64, Bytes)>>; 2],
    renders: AtomicU64,
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
            wake: Notify::new(),
            health: Default::default(),
            renders: AtomicU64::new(0),
        })
    }

    /// How many store updates rendered (and compressed) some bucket.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// The newest body of `format`, gzip-compressed when `gzip`.
    pub async fn body(&self, format: Format, gzip: bool) -> Result<Body, ScrapeError> {
        if !self.wanted.swap(true, Ordering::AcqRel) {
            self.wake.notify_one();
        }
        let mut rx = self.snapshot.subscribe();
        let snapshot = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ScrapeError::Task)?
            .clone()
            .ok_or(ScrapeError::Task)?;
        let health = self.health(format)?;
        Ok(match gzip {
            true => Body::gzip(&snapshot, format, &health),
            false => Body::plain(&snapshot, format, health),
        })
    }

    /// The health part as it is now (so that a class change and the
    /// counters that explain it come in one scrape), rendered again only
    /// when a health value moved.
    fn health(&self, format: Format) -> Result<Bytes, ScrapeError> {
        let mut last = self.health[format.slot()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Read before the render: a value that moves during it renders
        // again at the next scrape, never the other way round.
        let generation = self.shared.health.generation();
        if let Some((_, part)) = last.as_ref().filter(|(g, _)| *g == generation) {
            return Ok(part.clone());
        }
        let part = families::health(&self.shared.health, format);
        let part = Bytes::from(part.map_err(|_| ScrapeError::Encode)?);
        *last = Some((generation, part.clone()));
        Ok(part)
    }

    /// Keeps the snapshot current; returns only when the index's change
    /// feed is gone. Run it beside the scrapes (the server does).
    pub async fn refresh(self: Arc<Self>) {
        let mut generation = self.shared.subscribe();
        let changes = self.shared.changes();
        let mut store = Store::new(self.exposition, Sizing::default());
        let mut ages = tokio::time::interval(AGES_EVERY);
        ages.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first render waits for the watches' first lists (or a scrape,
        // whichever comes first), so that it is whole and the first scrape
        // after ready finds it done.
        while !self.wanted.load(Ordering::Acquire) && !self.shared.health.ready() {
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(READY_POLL) => {}
            }
        }
        let mut rendered: Option<tokio::time::Instant> = None;
        loop {
            let noted = match changes.lock() {
                Ok(mut c) => c.take(),
                Err(poisoned) => poisoned.into_inner().take(),
            };
            store.note(&noted);
            if !store.is_current() {
                let (shared, sink) = (self.shared.clone(), changes.clone());
                let (done, snapshot);
                (store, done, snapshot) = blocking(move || {
                    let mut store = store;
                    let done = store.update(&shared, &sink, SystemTime::now());
                    let snapshot = store.snapshot();
                    (store, done, snapshot)
                })
                .await;
                self.renders
                    .fetch_add(u64::from(done.buckets > 0), Ordering::Relaxed);
                self.snapshot.send_replace(Some(Arc::new(snapshot)));
                rendered = Some(tokio::time::Instant::now());
            }
            tokio::select! {
                changed = generation.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // A change after a quiet spell renders at once; while
                    // changes keep coming, one render per GATHER takes them
                    // all.
                    if let Some(at) = rendered {
                        tokio::time::sleep_until(at + GATHER).await;
                    }
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
