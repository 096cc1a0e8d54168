//! One rendered exposition per format, shared by every scrape.
//!
//! A render of 100k objects takes about half a second and 47 MB; doing it
//! per scrape made every scrape cost a render and every concurrent scraper
//! hold its own copy. Here a scrape takes the body of the last render when
//! it is still current, and at most one render per format runs at a time:
//! scrapes that arrive during a render wait for it and share its bytes.
//!
//! A body is current when it is younger than `max_age` (one second), or
//! when neither the index nor watch health changed since it was rendered
//! (`Shared::generation`) and it shows no lock age. Ages move with the
//! clock, so with a lock held a body is rebuilt at most once a second and
//! a scrape sees ages (and any change) at most one second old.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::timed::{render_health, IndexPart};
use super::Format;
use crate::shared::Shared;

/// How long a body is served even when its inputs changed: the contract's
/// staleness bound for `/metrics`.
pub const MAX_AGE: Duration = Duration::from_secs(1);

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
/// one gzip file (a single member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    chunks: Arc<Vec<Bytes>>,
}

impl Body {
    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body in one piece (a copy; for tests and small bodies).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len());
        for c in self.chunks.iter() {
            out.extend_from_slice(c);
        }
        Bytes::from(out)
    }
}

/// The cached state of one format.
#[derive(Default)]
struct Slot {
    /// The index part of the last render.
    part: Option<Arc<IndexPart>>,
    /// `Shared::index_generation` read before that render.
    generation: u64,
    /// When that render started.
    at: Option<Instant>,
    /// The last whole body per encoding (identity, gzip), and when it was
    /// assembled: reused for `max_age`.
    bodies: [Option<(Instant, Body)>; 2],
}

/// The cached exposition of every format; see the module documentation.
pub struct ScrapeCache {
    shared: Arc<Shared>,
    /// One per [`Format`], each behind its own lock: whoever holds it is
    /// the only one rendering or assembling that format.
    slots: [Mutex<Slot>; 2],
    max_age: Duration,
    renders: AtomicU64,
    compressions: AtomicU64,
    assemblies: AtomicU64,
}

impl std::fmt::Debug for ScrapeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrapeCache")
            .field("max_age", &self.max_age)
            .field("renders", &self.renders())
            .finish_non_exhaustive()
    }
}

impl ScrapeCache {
    /// A cache over `shared` with the contract's one-second bound.
    pub fn new(shared: Arc<Shared>) -> Arc<ScrapeCache> {
        Self::with_max_age(shared, MAX_AGE)
    }

    /// A cache whose bodies are served for up to `max_age` after their
    /// inputs changed.
    pub fn with_max_age(shared: Arc<Shared>, max_age: Duration) -> Arc<ScrapeCache> {
        Arc::new(ScrapeCache {
            shared,
            slots: [Mutex::new(Slot::default()), Mutex::new(Slot::default())],
            max_age,
            renders: AtomicU64::new(0),
            compressions: AtomicU64::new(0),
            assemblies: AtomicU64::new(0),
        })
    }

    /// How many index-part renders this cache has run.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// How many index-part compressions this cache has run.
    pub fn compressions(&self) -> u64 {
        self.compressions.load(Ordering::Relaxed)
    }

    /// How many bodies this cache has assembled (timed values and health
    /// written onto a rendered index part).
    pub fn assemblies(&self) -> u64 {
        self.assemblies.load(Ordering::Relaxed)
    }

    /// The current body of `format` in `encoding`, rendering (off the
    /// reactor) only when the cached one is not current.
    pub async fn body(
        self: &Arc<Self>,
        format: Format,
        encoding: AcceptEncoding,
    ) -> Result<Body, ScrapeError> {
        // Its own task, so that a scraper that hangs up mid-render does not
        // cancel the render the other waiters are counting on.
        let this = self.clone();
        tokio::spawn(async move { this.body_now(format, encoding).await })
            .await
            .map_err(|_| ScrapeError::Task)?
    }

    async fn body_now(
        &self,
        format: Format,
        encoding: AcceptEncoding,
    ) -> Result<Body, ScrapeError> {
        let slot = match format {
            Format::OpenMetrics => &self.slots[0],
            Format::Prometheus => &self.slots[1],
        };
        // Held across the render: the single flight.
        let mut slot = slot.lock().await;
        let generation = self.shared.index_generation();
        let started = Instant::now();
        let fresh = |at: Option<Instant>| {
            at.is_some_and(|t| started.saturating_duration_since(t) < self.max_age)
        };
        let gzip = encoding == AcceptEncoding::Gzip;
        let part_current = slot.part.is_some() && (slot.generation == generation || fresh(slot.at));
        if !part_current {
            let capacity = slot
                .part
                .as_ref()
                .map_or(64 * 1024, |p| p.len() + p.len() / 8);
            // Dropped before the render so that the old and the new text
            // are not both held here (scrapes still sending theirs keep them).
            *slot = Slot::default();
            let shared = self.shared.clone();
            // Compressed with the render: Prometheus always asks for gzip,
            // so the text around the timed blocks is compressed once here.
            let part = tokio::task::spawn_blocking(move || {
                let mut part = IndexPart::render(&shared, format, SystemTime::now(), capacity)
                    .map_err(|_| ScrapeError::Encode)?;
                part.compress().map_err(ScrapeError::Compress)?;
                Ok::<_, ScrapeError>(part)
            })
            .await
            .map_err(|_| ScrapeError::Task)??;
            self.renders.fetch_add(1, Ordering::Relaxed);
            self.compressions.fetch_add(1, Ordering::Relaxed);
            slot.part = Some(Arc::new(part));
            slot.generation = generation;
            slot.at = Some(started);
        }
        let which = usize::from(gzip);
        if let Some((at, body)) = &slot.bodies[which] {
            if fresh(Some(*at)) {
                return Ok(body.clone());
            }
        }
        let Some(part) = slot.part.clone() else {
            return Err(ScrapeError::Task);
        };
        let shared = self.shared.clone();
        let chunks = tokio::task::spawn_blocking(move || {
            let health = render_health(&shared, format).map_err(|_| ScrapeError::Encode)?;
            part.assemble(SystemTime::now(), health, gzip)
                .map_err(ScrapeError::Compress)
        })
        .await
        .map_err(|_| ScrapeError::Task)??;
        self.assemblies.fetch_add(1, Ordering::Relaxed);
        let body = Body {
            chunks: Arc::new(chunks),
        };
        slot.bodies[which] = Some((started, body.clone()));
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::kind::Kind;
    use crate::core::lockinfo::parse_lock_info;
    use crate::core::suffix::{lock_lease_name, state_suffix};
    use crate::index::{IndexResource, LockLease, ObjectKey, TfObject};

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

    async fn text(cache: &Arc<ScrapeCache>) -> String {
        match cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
        {
            Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
            Err(e) => panic!("{e}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_is_rebuilt_at_most_once_a_second_and_only_when_stale() {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        object(&shared, "a");
        assert!(text(&cache).await.contains("name=\"a\""));
        assert_eq!(cache.renders(), 1);
        // Nothing changed and no age shown: the body stays, however old.
        tokio::time::sleep(Duration::from_secs(30)).await;
        text(&cache).await;
        assert_eq!(cache.renders(), 1, "no change, no render");
        // A change is rendered at the next scrape...
        object(&shared, "b");
        assert!(text(&cache).await.contains("name=\"b\""));
        assert_eq!(cache.renders(), 2);
        // ...unless the body is younger than a second: then it waits.
        object(&shared, "c");
        assert!(
            !text(&cache).await.contains("name=\"c\""),
            "at most 1 s stale"
        );
        assert_eq!(cache.renders(), 2);
        tokio::time::sleep(MAX_AGE).await;
        assert!(text(&cache).await.contains("name=\"c\""));
        assert_eq!(cache.renders(), 3);
        // Health and lock ages are written onto the rendered index part
        // at scrape time: they move without a render, at most 1 s late.
        tokio::time::sleep(MAX_AGE).await;
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        assert!(text(&cache)
            .await
            .contains("captf_lock_exporter_pod_reads_total{result=\"found\"} 1"));
        assert_eq!(cache.renders(), 3);
        held_lock(&shared, "a");
        tokio::time::sleep(MAX_AGE).await;
        let first = text(&cache).await;
        assert!(first.contains("captf_state_lock_age_seconds{"));
        assert_eq!(cache.renders(), 4, "the new lock is a change");
        tokio::time::sleep(MAX_AGE).await;
        let later = text(&cache).await;
        assert_ne!(first, later, "ages moved");
        assert_eq!(cache.renders(), 4, "without a render");
        assert_eq!(text(&cache).await, later, "not within the second");
    }

    /// What a scrape gets is what an uncached render at that moment gives.
    #[tokio::test(start_paused = true)]
    async fn an_assembled_body_equals_an_uncached_render() {
        let (shared, _rx) = Shared::new();
        object(&shared, "a");
        held_lock(&shared, "a");
        held_lock(&shared, "b");
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        let cache = ScrapeCache::new(shared.clone());
        for format in [Format::OpenMetrics, Format::Prometheus] {
            let IndexPartAt { part, .. } = render_part(&shared, format);
            let now = SystemTime::now() + Duration::from_secs(3600);
            let health = render_health(&shared, format).expect("health");
            let body = part.assemble(now, health, false).expect("assembles");
            let joined: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
            let want = super::super::render_at(&shared, format, now).expect("renders");
            assert_eq!(String::from_utf8_lossy(&joined), want, "{format:?}");
        }
        // And through the cache, gzip included.
        let plain = cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
            .expect("plain");
        let gz = cache
            .body(Format::OpenMetrics, AcceptEncoding::Gzip)
            .await
            .expect("gzip");
        let mut unzipped = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(&gz.to_bytes()[..]),
            &mut unzipped,
        )
        .expect("gunzips");
        // Assembled at two instants: equal but for the ages.
        let plain = String::from_utf8_lossy(&plain.to_bytes()).into_owned();
        let timeless = crate::metrics::without_ages;
        assert!(timeless(&unzipped) == timeless(&plain), "gzip body differs");
    }

    struct IndexPartAt {
        part: IndexPart,
    }

    fn render_part(shared: &Arc<Shared>, format: Format) -> IndexPartAt {
        IndexPartAt {
            part: IndexPart::render(shared, format, SystemTime::now(), 1024).expect("renders"),
        }
    }

    #[tokio::test]
    async fn concurrent_scrapes_wait_for_one_render_and_one_compression() {
        let (shared, _rx) = Shared::new();
        for i in 0..200 {
            object(&shared, &format!("o{i}"));
        }
        let cache = ScrapeCache::new(shared.clone());
        let scrapes: Vec<_> = (0..16)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    cache
                        .body(Format::OpenMetrics, AcceptEncoding::Gzip)
                        .await
                        .ok()
                })
            })
            .collect();
        let mut bodies = Vec::new();
        for s in scrapes {
            bodies.push(s.await.ok().flatten());
        }
        assert!(bodies.iter().all(|b| b.is_some() && *b == bodies[0]));
        assert_eq!((cache.renders(), cache.compressions()), (1, 1));
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
