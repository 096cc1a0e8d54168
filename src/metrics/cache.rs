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

/// The content coding of a scrape's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptEncoding {
    /// The body as rendered.
    Identity,
    /// The body gzip-compressed (`Content-Encoding: gzip`).
    Gzip,
}

impl AcceptEncoding {
    /// Gzip when the `Accept-Encoding` header lists `gzip` (or `*`) with a
    /// non-zero quality, as Prometheus always does; identity otherwise.
    pub fn negotiate(header: Option<&str>) -> AcceptEncoding {
        let Some(header) = header else {
            return AcceptEncoding::Identity;
        };
        let gzip = header.split(',').any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if !(coding.eq_ignore_ascii_case("gzip") || coding == "*") {
                return false;
            }
            // q=0 means "not acceptable".
            !parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
        });
        if gzip {
            AcceptEncoding::Gzip
        } else {
            AcceptEncoding::Identity
        }
    }
}

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

/// A scrape's answer: the body as chunks that share the cached bytes, so
/// concurrent scrapers do not each hold a copy. With gzip, the chunks make
/// one gzip file (a single member). A plain body of a large index part is
/// kept compressed only ([`super::buckets::PLAIN_KEPT_UP_TO`]) and
/// decompressed step by step as it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    repr: Arc<Repr>,
}

#[derive(Debug, PartialEq, Eq)]
enum Repr {
    /// The bytes as sent.
    Chunks(Vec<Bytes>),
    /// Raw DEFLATE parts of the plain bytes, and their plain length.
    Deflated(Arc<Vec<Bytes>>, usize),
}

impl Body {
    fn chunks(chunks: Vec<Bytes>) -> Body {
        Body {
            repr: Arc::new(Repr::Chunks(chunks)),
        }
    }

    fn deflated(parts: Vec<Bytes>, len: usize) -> Body {
        Body {
            repr: Arc::new(Repr::Deflated(Arc::new(parts), len)),
        }
    }

    /// The bytes in order, as the server sends them: shared chunks, or
    /// plain steps of at most 256 KiB decompressed one at a time.
    pub fn frames(&self) -> Frames {
        match &*self.repr {
            Repr::Chunks(c) => Frames::Chunks(c.clone().into_iter()),
            Repr::Deflated(parts, _) => Frames::Inflate(gzip_parts::Inflate::new(parts.clone())),
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        match &*self.repr {
            Repr::Chunks(c) => c.iter().map(Bytes::len).sum(),
            Repr::Deflated(_, len) => *len,
        }
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the body is kept compressed and decompressed per scrape.
    pub fn is_deflated(&self) -> bool {
        matches!(&*self.repr, Repr::Deflated(..))
    }

    /// The body in one piece (a copy; for tests and small bodies).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len());
        for c in self.frames() {
            out.extend_from_slice(&c);
        }
        Bytes::from(out)
    }
}

/// The bytes of a [`Body`] in order.
pub enum Frames {
    /// Shared chunks.
    Chunks(std::vec::IntoIter<Bytes>),
    /// Plain steps decompressed one at a time.
    Inflate(gzip_parts::Inflate),
}

impl Iterator for Frames {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        match self {
            Frames::Chunks(c) => c.next(),
            Frames::Inflate(i) => i.next(),
        }
    }
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
mod tests {
    use super::*;
    use crate::core::kind::Kind;
    use crate::core::lockinfo::parse_lock_info;
    use crate::core::suffix::{lock_lease_name, state_suffix};
    use crate::index::{IndexResource, LockLease, ObjectKey, TfObject};
    use futures::FutureExt;

    fn object(shared: &Shared, name: &str) {
        let obj = TfObject {
            kind: Kind::TerraformMachine,
            name: name.into(),
            cluster_label: None,
            jobs: None,
            cluster: None,
            captf: Default::default(),
        };
        shared.update(|ix, now| ix.apply((obj.kind, ObjectKey::new("ns", name)), obj, now));
    }

    fn held_lock(shared: &Shared, name: &str) {
        let suffix = state_suffix("ns", Kind::TerraformMachine, name);
        let info = r#"{"ID":"id-1","Operation":"OperationTypeApply","Info":"","Who":"bob@laptop","Version":"1.9.0","Created":"2026-09-26T15:53:38Z","Path":""}"#;
        let lease = LockLease::new(
            "ns".into(),
            suffix.clone(),
            Some("TerraformMachine"),
            Some(name.into()),
            "id-1".into(),
            parse_lock_info(info).map(Some),
        );
        shared
            .update(|ix, now| ix.apply(ObjectKey::new("ns", lock_lease_name(&suffix)), lease, now));
    }

    /// A fleet like the bench's: `n` TerraformMachines in 100 namespaces, a
    /// tenth of them held by workstations.
    fn fleet(shared: &Shared, n: usize) {
        for i in 0..n {
            let ns = format!("fleet-{:03}", i % 100);
            let name = format!("wl-{:05}-m-{:04}", i / 100, i % 100);
            let obj = TfObject {
                kind: Kind::TerraformMachine,
                name: name.clone(),
                cluster_label: Some(format!("wl-{:05}", i / 100)),
                jobs: None,
                cluster: None,
                captf: Default::default(),
            };
            let suffix = state_suffix(&ns, Kind::TerraformMachine, &name);
            shared.update(|ix, now| ix.apply((obj.kind, ObjectKey::new(&ns, &name)), obj, now));
            if i % 10 == 0 {
                let info = format!(
                    r#"{{"ID":"{:08x}-aaaa-bbbb-cccc-{:012x}","Operation":"OperationTypeApply","Info":"","Who":"user{}@laptop-{}","Version":"1.9.0","Created":"2026-09-26T15:53:38Z","Path":""}}"#,
                    i * 7919,
                    i,
                    i % 50,
                    i % 20
                );
                let lease = LockLease::new(
                    ns.clone(),
                    suffix.clone(),
                    Some("TerraformMachine"),
                    Some(name.clone()),
                    format!("{:08x}", i * 7919),
                    parse_lock_info(&info).map(Some),
                );
                shared.update(|ix, now| {
                    ix.apply(ObjectKey::new(&ns, lock_lease_name(&suffix)), lease, now)
                });
            }
        }
    }

    /// The gzip body, made of parts compressed apart (so that a change
    /// compresses one bucket again), is at most 1.2x the same body
    /// compressed whole at gzip's default level. Prints both sizes.
    #[tokio::test]
    async fn the_gzip_body_is_close_to_the_whole_body_compressed_at_once() {
        let (shared, _rx) = Shared::new();
        fleet(&shared, 10_000);
        let cache = ScrapeCache::new(shared.clone());
        let gz = cache
            .body(Format::OpenMetrics, AcceptEncoding::Gzip)
            .await
            .expect("gzip body");
        let plain = gunzip(&gz);
        let mut whole = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut whole, &plain).expect("compress");
        let whole = whole.finish().expect("compress").len();
        let served = gz.to_bytes().len();
        println!(
            "plain {} B, served gzip {served} B, whole at level 6 {whole} B: {:.2}x",
            plain.len(),
            served as f64 / whole as f64
        );
        assert!(
            served as f64 <= whole as f64 * 1.2,
            "served {served} B against {whole} B compressed whole"
        );
    }

    /// A gzip body's plain bytes; one member must hold them all.
    fn gunzip(body: &Body) -> Vec<u8> {
        let mut out = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&body.to_bytes()[..]),
            &mut out,
        )
        .expect("one gzip member");
        out
    }

    async fn text(cache: &Arc<ScrapeCache>) -> String {
        match cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
        {
            Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Scrapes until the body satisfies `pred`, for at most `within`
    /// (virtual time): the renderer publishes on its own schedule.
    async fn wait_body(
        cache: &Arc<ScrapeCache>,
        within: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let t = text(cache).await;
            if pred(&t) {
                return t;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not within {within:?}:\n{t}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_published_after_the_debounce_and_a_quiet_index_renders_nothing() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        object(&shared, "a");
        assert!(text(&cache).await.contains("name=\"a\""));
        assert_eq!(cache.renders(), 1);
        // Nothing changes: no pass at all, health included.
        let passes = cache.passes();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(cache.passes(), passes, "at rest the renderer sleeps");
        text(&cache).await;
        assert_eq!(cache.renders(), 1, "no change, no render");
        // A change shows within the debounce and one render (sooner when
        // the health tick runs a pass first).
        let t0 = tokio::time::Instant::now();
        object(&shared, "b");
        wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
        assert!(t0.elapsed() < DEBOUNCE * 3, "{:?}", t0.elapsed());
        assert_eq!(cache.renders(), 2);
        // A burst of changes within the debounce costs one render.
        for n in ["c", "d", "e", "f"] {
            object(&shared, n);
        }
        wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"f\"")).await;
        assert_eq!(cache.renders(), 3, "one render for the burst");
        // A held lock shows when it was taken, a timestamp: the body does
        // not move with the clock.
        held_lock(&shared, "a");
        let with_lock = wait_body(&cache, Duration::from_secs(1), |t| {
            t.contains("captf_state_lock_acquired_timestamp_seconds{")
        })
        .await;
        assert!(!with_lock.contains("captf_state_lock_age_seconds"));
        let publications = cache.publications();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            text(&cache).await,
            with_lock,
            "the clock alone moves nothing"
        );
        assert_eq!(cache.publications(), publications, "nothing published");
    }

    /// A change costs the buckets it touches, not the fleet: one object's
    /// write encodes one bucket again, and the body still equals an
    /// uncached render.
    #[tokio::test(start_paused = true)]
    async fn a_change_of_one_object_encodes_one_bucket() {
        let (shared, _rx) = Shared::new();
        for i in 0..500 {
            object(&shared, &format!("m-{i}"));
        }
        let cache = ScrapeCache::new(shared.clone());
        text(&cache).await;
        let first = cache.bucket_renders();
        assert_eq!(
            first,
            crate::metrics::buckets::BUCKETS as u64,
            "every bucket once"
        );
        held_lock(&shared, "m-7");
        wait_body(&cache, Duration::from_secs(1), |t| {
            t.contains(
                "captf_state_lock_info{namespace=\"ns\",kind=\"TerraformMachine\",name=\"m-7\"",
            )
        })
        .await;
        assert_eq!(cache.bucket_renders() - first, 1, "one bucket");
        // Another change later: the held lock's bucket is not encoded again
        // because its age moved (ages are not exported).
        tokio::time::sleep(Duration::from_secs(5)).await;
        object(&shared, "m-new");
        let body = wait_body(&cache, Duration::from_secs(1), |t| {
            t.contains("name=\"m-new\"")
        })
        .await;
        assert_eq!(cache.bucket_renders() - first, 2, "only m-new's bucket");
        let uncached = crate::metrics::render_at(&shared, Format::OpenMetrics, SystemTime::now())
            .expect("renders");
        assert!(
            body == uncached,
            "the bucketed body is not the whole render: {}",
            crate::metrics::incremental_tests::first_difference(
                body.as_bytes(),
                uncached.as_bytes()
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn health_moves_within_a_second_without_an_index_render() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        object(&shared, "a");
        text(&cache).await;
        let renders = cache.renders();
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        wait_body(&cache, HEALTH_EVERY + DEBOUNCE, |t| {
            t.contains("captf_lock_exporter_pod_reads_total{result=\"found\"} 1")
        })
        .await;
        assert_eq!(cache.renders(), renders, "health is its own part");
    }

    /// An index change is not held back by a health move waiting for its
    /// second: it shows after the debounce.
    #[tokio::test(start_paused = true)]
    async fn an_index_change_does_not_wait_behind_a_health_move() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        object(&shared, "a");
        wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"a\"")).await;
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let t0 = tokio::time::Instant::now();
        object(&shared, "b");
        wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
        assert!(t0.elapsed() < DEBOUNCE * 3, "{:?}", t0.elapsed());
    }

    /// Health that moves all the time (a stream of watch events) costs at
    /// most one pass a second, and each move shows within a second.
    #[tokio::test(start_paused = true)]
    async fn moving_health_costs_at_most_a_pass_a_second() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        text(&cache).await;
        let passes = cache.passes();
        for n in 1..=100u64 {
            shared.health.on_pod_read(crate::health::ReadResult::Found);
            tokio::time::sleep(Duration::from_millis(100)).await;
            if n % 10 == 0 {
                let want = format!("captf_lock_exporter_pod_reads_total{{result=\"found\"}} {n}");
                wait_body(&cache, HEALTH_EVERY, |t| t.contains(&want)).await;
            }
        }
        let made = cache.passes() - passes;
        assert!((5..=11).contains(&made), "{made} passes for 10 s of moves");
        let passes = cache.passes();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(cache.passes(), passes, "none once health stops moving");
    }

    /// A scrape that arrives while the renderer is inside a render gets the
    /// previous complete body on its first poll: it never waits.
    #[tokio::test(start_paused = true)]
    async fn a_scrape_during_a_render_gets_the_previous_complete_body_at_once() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        object(&shared, "a");
        let before = text(&cache).await;
        for encoding in [AcceptEncoding::Identity, AcceptEncoding::Gzip] {
            cache
                .body(Format::OpenMetrics, encoding)
                .await
                .expect("first");
        }
        let hold = cache
            .gate
            .acquire_many(GATE_PERMITS as u32)
            .await
            .expect("the gate");
        let entries = cache.gate_entries.load(Ordering::SeqCst);
        object(&shared, "b");
        // The renderer sees the change and comes to the gate, mid-pass.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while cache.gate_entries.load(Ordering::SeqCst) == entries {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the renderer never came to the gate"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let renders = cache.renders();
        for encoding in [AcceptEncoding::Identity, AcceptEncoding::Gzip] {
            let now = cache
                .body(Format::OpenMetrics, encoding)
                .now_or_never()
                .expect("answered on its first poll")
                .expect("a body");
            if encoding == AcceptEncoding::Identity {
                assert_eq!(String::from_utf8_lossy(&now.to_bytes()), before);
            }
        }
        assert_eq!(cache.renders(), renders, "still inside the render");
        drop(hold);
        wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
    }

    /// What a scrape gets is what an uncached render at that moment gives,
    /// byte for byte, plain and (once decompressed) gzip.
    #[tokio::test]
    async fn a_published_body_equals_an_uncached_render() {
        let (shared, _rx) = Shared::new();
        object(&shared, "a");
        held_lock(&shared, "a");
        held_lock(&shared, "b");
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        let cache = ScrapeCache::new(shared.clone());
        for format in [Format::OpenMetrics, Format::Prometheus] {
            let plain = cache
                .body(format, AcceptEncoding::Identity)
                .await
                .expect("plain");
            let uncached =
                crate::metrics::render_at(&shared, format, SystemTime::now()).expect("renders");
            assert!(
                plain.to_bytes() == uncached.as_bytes(),
                "{format:?} differs"
            );
            let zipped = cache
                .body(format, AcceptEncoding::Gzip)
                .await
                .expect("gzip");
            assert!(
                gunzip(&zipped) == uncached.as_bytes(),
                "{format:?} gzip differs"
            );
        }
    }

    /// Past the plain limit a render keeps only gzip parts: a plain scrape
    /// is decompressed from them in steps and still gives the uncached
    /// render's bytes, before and after a change, and the render goes back
    /// to plain text when the index part shrinks well below the limit.
    #[tokio::test(start_paused = true)]
    async fn a_compact_render_serves_plain_scrapes_from_its_gzip_parts() {
        let (shared, _rx) = Shared::new();
        for i in 0..300 {
            object(&shared, &format!("m-{i}"));
        }
        let cache = ScrapeCache::build(shared.clone(), Exposition::default(), 20_000);
        let same_as_uncached = |body: &Body| {
            let uncached =
                crate::metrics::render_at(&shared, Format::OpenMetrics, SystemTime::now())
                    .expect("renders");
            body.to_bytes() == uncached.as_bytes()
        };
        let plain = cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
            .expect("plain");
        assert!(plain.is_deflated(), "{} bytes kept compressed", plain.len());
        assert!(same_as_uncached(&plain));
        held_lock(&shared, "m-7");
        let t = wait_body(&cache, Duration::from_secs(1), |t| {
            t.contains("captf_state_lock_info{")
        })
        .await;
        assert!(t.ends_with("# EOF\n"));
        let plain = cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
            .expect("plain");
        assert!(same_as_uncached(&plain), "after a change");
        let zipped = cache
            .body(Format::OpenMetrics, AcceptEncoding::Gzip)
            .await
            .expect("gzip");
        assert!(gunzip(&zipped) == plain.to_bytes(), "gzip and plain agree");
        // Shrink far below the limit: plain text again.
        for i in 0..300 {
            let key = (
                Kind::TerraformMachine,
                ObjectKey::new("ns", format!("m-{i}")),
            );
            shared.update(|ix, now| IndexResource::<TfObject>::delete(ix, key, now));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let body = cache
                .body(Format::OpenMetrics, AcceptEncoding::Identity)
                .await
                .expect("plain");
            if !body.is_deflated() {
                assert!(same_as_uncached(&body));
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "still compact");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn concurrent_first_scrapes_share_one_render_and_one_compression() {
        let (shared, _rx) = Shared::new();
        object(&shared, "a");
        let cache = ScrapeCache::new(shared.clone());
        let scrapes: Vec<_> = (0..16)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.body(Format::OpenMetrics, AcceptEncoding::Gzip).await })
            })
            .collect();
        let mut bodies = Vec::new();
        for s in scrapes {
            bodies.push(s.await.expect("joins").expect("a body"));
        }
        assert!(bodies.windows(2).all(|w| w[0] == w[1]), "one shared body");
        assert_eq!(cache.renders(), 1);
        assert_eq!(cache.compressions(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn lock_ages_only_with_the_flag_and_then_every_second() {
        let (shared, _rx) = Shared::new();
        held_lock(&shared, "a");
        let cache = ScrapeCache::with_exposition(shared.clone(), Exposition { lock_age: true });
        let first = text(&cache).await;
        assert!(first.contains("captf_state_lock_age_seconds{"));
        tokio::time::sleep(HEALTH_EVERY * 2).await;
        assert_ne!(text(&cache).await, first, "ages moved");
    }

    #[test]
    fn accept_encoding_is_negotiated() {
        use AcceptEncoding::*;
        for (header, want) in [
            (None, Identity),
            (Some(""), Identity),
            (Some("gzip"), Gzip),
            // What Prometheus sends.
            (Some("gzip"), Gzip),
            (Some("deflate, GZip;q=0.5"), Gzip),
            (Some("br, *"), Gzip),
            (Some("gzip;q=0"), Identity),
            (Some("gzip; q=0.0, identity"), Identity),
            (Some("identity"), Identity),
            (Some("x-gzip-nope"), Identity),
        ] {
            assert_eq!(AcceptEncoding::negotiate(header), want, "{header:?}");
        }
    }
}
