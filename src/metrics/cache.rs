//! The newest complete body per format and encoding, shared by every
//! scrape; a scrape never waits on a render.
//!
//! One task per cache renders beside the scrapes: when the index changes
//! (after [`DEBOUNCE`], so a burst of changes costs one render), and when
//! a watch-health value or a self-metric counter moved (at most once a
//! [`HEALTH_EVERY`] for those alone). It renders only the formats and encodings scrapes have asked
//! for, and publishes each body whole: a scrape takes the newest published
//! body, so one that arrives during a render gets the previous complete
//! one. Only the first scrape of a format and encoding ever waits, for the
//! first render of it. Bodies are chunks of shared bytes: concurrent
//! scrapers do not each hold a copy.
//!
//! A body shows the index as of the render that made it (a change shows
//! after the debounce and one render) and health at most
//! [`HEALTH_EVERY`] old. Nothing in it moves with the clock alone
//! (timestamps, not ages), so an idle exporter publishes a new body only
//! when a health value moved.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{watch, Notify};

use super::body::{AcceptEncoding, Body};
use super::buckets::IndexRender;
use super::gzip_parts;
use super::parts::render_health;
use super::{Exposition, Format};
use crate::index::Changes;
use crate::shared::Shared;

/// How long the renderer lets a burst of index changes settle before it
/// renders them: short next to the 250 ms a person or a fast alert
/// expects, long enough that a relist of thousands of objects costs one
/// render.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// The most a moved health value waits to be rendered, and the least time
/// between two passes made for health alone: the contract's staleness
/// bound for watch health and the self-metric counters.
pub const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// Why a scrape got no body.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The encoder failed.
    #[error("encoding the exposition failed")]
    Encode,
    /// Compressing failed.
    #[error("compressing the exposition failed: {0}")]
    Compress(#[source] std::io::Error),
    /// The render task panicked or was cancelled.
    #[error("the render task did not finish")]
    Task,
}

fn slot_of(format: Format, encoding: AcceptEncoding) -> usize {
    let f = match format {
        Format::OpenMetrics => 0,
        Format::Prometheus => 2,
    };
    f + usize::from(encoding == AcceptEncoding::Gzip)
}

/// Permits of the test gate: a test that takes them all holds the renderer.
#[cfg(test)]
const GATE_PERMITS: usize = 1 << 20;

/// The newest published body of every pair, and which pairs are wanted.
pub struct ScrapeCache {
    shared: Arc<Shared>,
    /// Index parts larger than this keep only their gzip form.
    plain_limit: usize,
    /// Which lock keys changed since the last pass.
    changes: Arc<Mutex<Changes>>,
    exposition: Exposition,
    /// The newest complete body per pair (None before its first render).
    published: [watch::Sender<Option<Body>>; 4],
    /// Pairs some scrape has asked for: the renderer keeps those current.
    wanted: [AtomicBool; 4],
    /// Wakes the renderer when a pair is first wanted.
    wake: Arc<Notify>,
    renders: AtomicU64,
    bucket_renders: AtomicU64,
    compressions: AtomicU64,
    publications: AtomicU64,
    passes: AtomicU64,
    /// Tests hold the renderer inside a render with this.
    #[cfg(test)]
    gate: tokio::sync::Semaphore,
    /// How often the renderer has come to the gate (tests wait on it).
    #[cfg(test)]
    gate_entries: AtomicU64,
}

impl std::fmt::Debug for ScrapeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrapeCache")
            .field("renders", &self.renders())
            .field("publications", &self.publications())
            .finish_non_exhaustive()
    }
}

/// What the renderer keeps of one format between passes.
#[derive(Default)]
struct FormatState {
    /// The index part, bucket by bucket.
    index: Option<IndexRender>,
    /// The last health part rendered.
    health: Option<Bytes>,
}

impl ScrapeCache {
    /// A cache over `shared` with the default families. Must be called in
    /// a Tokio runtime: it spawns the renderer, which ends with the cache.
    pub fn new(shared: Arc<Shared>) -> Arc<ScrapeCache> {
        Self::with_exposition(shared, Exposition::default())
    }

    /// A cache that also renders the optional families of `exposition`.
    pub fn with_exposition(shared: Arc<Shared>, exposition: Exposition) -> Arc<ScrapeCache> {
        Self::build(shared, exposition, super::buckets::PLAIN_KEPT_UP_TO)
    }

    fn build(shared: Arc<Shared>, exposition: Exposition, plain_limit: usize) -> Arc<ScrapeCache> {
        let cache = Arc::new(ScrapeCache {
            plain_limit,
            changes: shared.changes(),
            shared: shared.clone(),
            exposition,
            published: std::array::from_fn(|_| watch::channel(None).0),
            wanted: std::array::from_fn(|_| AtomicBool::new(false)),
            wake: Arc::new(Notify::new()),
            renders: AtomicU64::new(0),
            bucket_renders: AtomicU64::new(0),
            compressions: AtomicU64::new(0),
            publications: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            #[cfg(test)]
            gate: tokio::sync::Semaphore::new(GATE_PERMITS),
            #[cfg(test)]
            gate_entries: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&cache);
        let wake = cache.wake.clone();
        tokio::spawn(async move {
            // A renderer that died would leave every scrape on its last
            // body forever: stale data served as fresh. It ends the
            // process instead, as the supervisor does for its tasks.
            let ran = std::panic::AssertUnwindSafe(run(weak, shared, wake))
                .catch_unwind()
                .await;
            if ran.is_err() {
                tracing::error!("the exposition renderer panicked; exiting");
                std::process::exit(1);
            }
        });
        cache
    }

    /// How many index-part renders this cache has run.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// How many buckets of the index part this cache has encoded: a change
    /// of one object costs one.
    pub fn bucket_renders(&self) -> u64 {
        self.bucket_renders.load(Ordering::Relaxed)
    }

    /// How many index-part compressions this cache has run.
    pub fn compressions(&self) -> u64 {
        self.compressions.load(Ordering::Relaxed)
    }

    /// How many passes the renderer has made (each renders the health
    /// part; an exporter at rest makes none).
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// How many bodies this cache has published.
    pub fn publications(&self) -> u64 {
        self.publications.load(Ordering::Relaxed)
    }

    /// The newest body of `format` in `encoding`. Waits only when none was
    /// ever rendered for this pair (its first scrape).
    pub async fn body(
        self: &Arc<Self>,
        format: Format,
        encoding: AcceptEncoding,
    ) -> Result<Body, ScrapeError> {
        let slot = slot_of(format, encoding);
        if let Some(body) = self.published[slot].borrow().clone() {
            return Ok(body);
        }
        let mut rx = self.published[slot].subscribe();
        if !self.wanted[slot].swap(true, Ordering::AcqRel) {
            self.wake.notify_one();
        }
        let body = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ScrapeError::Task)?;
        body.clone().ok_or(ScrapeError::Task)
    }

    /// One pass: every wanted pair brought up to date and published when
    /// its bytes changed.
    async fn pass(self: &Arc<Self>, state: &mut [FormatState; 2]) -> Result<(), ScrapeError> {
        // Every render kept learns what changed, wanted this pass or not.
        let changes = match self.changes.lock() {
            Ok(mut c) => c.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        for st in state.iter_mut() {
            if let Some(render) = st.index.as_mut() {
                render.note(&changes);
            }
        }
        drop(changes);
        for (fi, format) in [Format::OpenMetrics, Format::Prometheus]
            .into_iter()
            .enumerate()
        {
            let plain_slot = slot_of(format, AcceptEncoding::Identity);
            let gzip_slot = slot_of(format, AcceptEncoding::Gzip);
            let want_plain = self.wanted[plain_slot].load(Ordering::Acquire);
            let want_gzip = self.wanted[gzip_slot].load(Ordering::Acquire);
            if !want_plain && !want_gzip {
                continue;
            }
            let st = &mut state[fi];
            let index_current = st.index.as_ref().is_some_and(IndexRender::is_current);
            // A compact render sends plain bodies from its gzip parts too.
            let needs_gz = st
                .index
                .as_ref()
                .is_some_and(|r| (want_gzip || r.is_compact()) && !r.compressed());
            let mut moved = false;
            if !index_current || needs_gz {
                let render = match st.index.take() {
                    Some(r) => r,
                    None => IndexRender::new(format, self.exposition)
                        .map_err(|_| ScrapeError::Encode)?
                        .with_plain_limit(self.plain_limit),
                };
                let shared = self.shared.clone();
                let update = !index_current;
                #[cfg(test)]
                let _held = {
                    self.gate_entries.fetch_add(1, Ordering::SeqCst);
                    self.gate.acquire().await
                };
                let (render, encoded, compressed) = tokio::task::spawn_blocking(move || {
                    let mut render = render;
                    let encoded = if update {
                        render
                            .update(&shared, SystemTime::now())
                            .map_err(|_| ScrapeError::Encode)?
                    } else {
                        0
                    };
                    let compressed = if want_gzip || render.is_compact() {
                        render.compress().map_err(ScrapeError::Compress)?
                    } else {
                        0
                    };
                    Ok::<_, ScrapeError>((render, encoded, compressed))
                })
                .await
                .map_err(|_| ScrapeError::Task)??;
                if update {
                    self.renders.fetch_add(1, Ordering::Relaxed);
                    self.bucket_renders
                        .fetch_add(encoded as u64, Ordering::Relaxed);
                }
                if compressed > 0 {
                    self.compressions.fetch_add(1, Ordering::Relaxed);
                }
                moved = encoded > 0 || compressed > 0 || update && render.overview_moved();
                st.index = Some(render);
            }
            let Some(render) = st.index.as_ref() else {
                return Err(ScrapeError::Task);
            };
            let health =
                Bytes::from(render_health(&self.shared, format).map_err(|_| ScrapeError::Encode)?);
            if st.health.as_ref() != Some(&health) {
                st.health = Some(health.clone());
                moved = true;
            }
            let missing = |slot: usize| self.published[slot].borrow().is_none();
            let plain_due = want_plain && (moved || missing(plain_slot));
            let gzip_due = want_gzip && (moved || missing(gzip_slot));
            if plain_due && !render.is_compact() {
                let Some(mut chunks) = render.chunks() else {
                    return Err(ScrapeError::Task);
                };
                chunks.push(health.clone());
                self.publish(plain_slot, Body::chunks(chunks));
            }
            if gzip_due || plain_due && render.is_compact() {
                let Some(mut parts) = render.gz_parts() else {
                    return Err(ScrapeError::Task);
                };
                let health_gz = gzip_parts::part(&health, true).map_err(ScrapeError::Compress)?;
                parts.push(&health_gz);
                if plain_due && render.is_compact() {
                    let len = parts.iter().map(|p| p.plain_len()).sum();
                    let deflate = parts.iter().map(|p| p.deflate.clone()).collect();
                    self.publish(plain_slot, Body::deflated(deflate, len));
                }
                if gzip_due {
                    self.publish(gzip_slot, Body::chunks(gzip_parts::stream(&parts)));
                }
            }
        }
        Ok(())
    }

    fn publish(&self, slot: usize, body: Body) {
        self.publications.fetch_add(1, Ordering::Relaxed);
        self.published[slot].send_replace(Some(body));
    }
}

/// The renderer: a pass, then wait for an index change (and the debounce),
/// a newly wanted pair, or a health change, at most one pass a
/// [`HEALTH_EVERY`] for health alone (a stream of events moves a counter
/// with each). An exporter at rest, whose health does not move, makes no
/// pass at all; with `--export-lock-age` it makes one every second, since
/// ages move with the clock. Ends when the cache is dropped.
async fn run(cache: Weak<ScrapeCache>, shared: Arc<Shared>, wake: Arc<Notify>) {
    let mut changes = shared.subscribe();
    let mut health = shared.health.subscribe();
    let ages = cache.upgrade().is_some_and(|c| c.exposition.lock_age);
    let mut tick = tokio::time::interval(HEALTH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut state: [FormatState; 2] = Default::default();
    loop {
        let last_pass = {
            let Some(cache) = cache.upgrade() else {
                return;
            };
            // What moved before this point is in this pass's health part.
            health.borrow_and_update();
            cache.passes.fetch_add(1, Ordering::Relaxed);
            let at = tokio::time::Instant::now();
            if let Err(e) = cache.pass(&mut state).await {
                // The published bodies stay; the next pass tries again.
                tracing::error!(error = %e, "rendering the exposition failed");
            }
            at
        };
        // When a health move is due to be rendered: a second after the last
        // pass at the soonest. An index change does not wait for it.
        let mut health_due: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    tokio::time::sleep(DEBOUNCE).await;
                    changes.borrow_and_update();
                    break;
                }
                () = wake.notified() => break,
                moved = health.changed(), if health_due.is_none() => {
                    if moved.is_err() {
                        return;
                    }
                    health_due = Some(last_pass + HEALTH_EVERY);
                }
                () = tokio::time::sleep_until(health_due.unwrap_or(last_pass)), if health_due.is_some() => break,
                _ = tick.tick(), if ages => break,
            }
        }
    }
}

#[cfg(test)]
mod tests;
