//! The index part of the exposition in buckets, each rendered only when
//! its rows changed, so that a change costs about one bucket's render
//! instead of the fleet's (kube-state-metrics keeps per-object series for
//! the same reason).
//!
//! Every row (a held lock, a known object, a force-unlock counter) belongs
//! to one of [`BUCKETS`] buckets by a fixed hash of its lock key
//! (namespace, state suffix), which a lock, its object and the object's
//! counters share. The index marks the keys whose series a write moved
//! ([`crate::index::Changes`]); the renderer keeps the keys of each bucket
//! and, per metric family, the sample lines it encoded for them, and after
//! a change copies out and encodes only the buckets of the marked keys,
//! each under its own short read lock. A body is, per family, its
//! HELP/TYPE lines and then every bucket's lines of that family in bucket
//! order (within a bucket, label order), then the overview families:
//! chunks of shared bytes, no copy. The encoder is prometheus-client's, so
//! each line is what a whole render would write (a test renders random
//! change sequences both ways and compares).
//!
//! gzip: each (bucket, family) block is compressed on its own as a part of
//! one DEFLATE stream ([`super::gzip_parts`]), so a change recompresses one
//! bucket too.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::gzip_parts;
use super::snapshot::Rows;
use super::{families, Exposition, Format};
use crate::core::classify::HolderClass;
use crate::index::{Changes, LockKey};
use crate::shared::Shared;

/// Buckets of the index part. More make a change cheaper and the gzip
/// body larger (each block is compressed on its own, without the history
/// of the blocks before it). Measured at 10k objects: the gzip body is
/// 219 kB compressed whole, 376 kB in 16 buckets, 597 kB in 64; 16 make a
/// change cost a sixteenth of a whole render.
pub(crate) const BUCKETS: usize = 16;

/// Largest index part kept as plain text beside its gzip form. Past it
/// (about 25k objects) the plain text is dropped once compressed and a
/// plain scrape decompresses the shared gzip parts as it sends them: at
/// 100k objects that is 61 MB less memory, for a plain scrape (never
/// Prometheus, which asks for gzip) that costs a decompression instead of
/// a copy.
pub(crate) const PLAIN_KEPT_UP_TO: usize = 16 * 1024 * 1024;

fn hash_lines(lines: &[Bytes]) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    lines
        .iter()
        .map(|l| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            l.hash(&mut h);
            h.finish()
        })
        .collect()
}

/// The bucket of a lock key (namespace, state suffix): FNV-1a, fixed
/// across runs and versions, so the body's order is too. A lock, its
/// object and the object's counters share the key, so one change of them
/// touches one bucket.
fn bucket_of(key: &LockKey) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [key.namespace.as_str(), key.suffix.as_str()] {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h % BUCKETS as u64) as usize
}

/// Encodes the overview families.
#[derive(Debug)]
struct OverviewCollector {
    per_class: [(HolderClass, u64); 5],
    version: &'static str,
}

impl Collector for OverviewCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        families::encode_overview(&mut enc, &self.per_class, self.version)
    }
}

/// Per family (in encoding order): the byte ranges of its header lines
/// and of its sample lines in `text`. Every family starts with its
/// `# HELP` line, rows or not.
fn split_families(text: &str) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let mut out: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let end = at + line.len();
        if line.starts_with("# HELP ") {
            out.push((at..end, end..end));
        } else if let Some((header, samples)) = out.last_mut() {
            if line.starts_with('#') && samples.start == samples.end {
                header.end = end;
                *samples = end..end;
            } else {
                samples.end = end;
            }
        }
        // Nothing comes before the first HELP line.
        at = end;
    }
    out
}

/// Encodes rows: per family, the sample lines (no header lines), slices
/// of one buffer.
fn encode_rows(
    rows: Rows,
    format: Format,
    exposition: Exposition,
) -> Result<Vec<Bytes>, std::fmt::Error> {
    // About what a row's lines take: an object's five series, a held
    // lock's four more, a counter's one.
    let capacity =
        520 * rows.objects.len() + 600 * rows.locks.len() + 110 * rows.force_unlocks.len() + 4096;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RowsCollector { rows, exposition }));
    let mut text = super::parts::encode(&registry, format, capacity)?;
    // The buffer doubled as it grew: hand on only what it holds.
    text.shrink_to_fit();
    let ranges = split_families(&text);
    let text = Bytes::from(text);
    Ok(ranges.into_iter().map(|(_, s)| text.slice(s)).collect())
}

/// The header lines of every per-row family, in order.
fn row_headers(format: Format, exposition: Exposition) -> Result<Vec<Bytes>, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RowsCollector {
        rows: Rows::default(),
        exposition,
    }));
    let text = super::parts::encode(&registry, format, 64 * 1024)?;
    let ranges = split_families(&text);
    let text = Bytes::from(text);
    Ok(ranges.into_iter().map(|(h, _)| text.slice(h)).collect())
}

/// Encodes the per-row families of one bucket's rows.
#[derive(Debug)]
struct RowsCollector {
    rows: Rows,
    exposition: Exposition,
}

impl Collector for RowsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        families::encode_locks(&mut enc, &self.rows.locks, self.exposition)?;
        families::encode_objects(&mut enc, &self.rows.objects)?;
        families::encode_force_unlocks(&mut enc, &self.rows.force_unlocks)
    }
}

/// Each block compressed as a part of its own (never the stream's last).
fn compress_lines(lines: &[Bytes]) -> std::io::Result<Vec<gzip_parts::Part>> {
    lines.iter().map(|l| gzip_parts::part(l, false)).collect()
}

/// One bucket as rendered: the lock keys in it, its lines per family, and
/// those compressed once a gzip body was asked for.
#[derive(Default)]
struct Bucket {
    /// Every key of this bucket that had series at its last render, and
    /// the marked keys since (whether they still have any is found when
    /// the bucket is rendered).
    keys: HashSet<LockKey>,
    /// Marked since its last render.
    dirty: bool,
    /// Per family its sample lines (empty when the render is compact).
    lines: Vec<Bytes>,
    /// Per family a hash of its lines, when the render is compact: how an
    /// unchanged bucket is told without its text.
    hashes: Vec<u64>,
    gz: Option<Vec<gzip_parts::Part>>,
}

impl Bucket {
    /// Plain bytes of this bucket.
    fn plain_len(&self) -> usize {
        match &self.gz {
            Some(gz) if self.lines.is_empty() => gz.iter().map(gzip_parts::Part::plain_len).sum(),
            _ => self.lines.iter().map(Bytes::len).sum(),
        }
    }
}

/// The index part of one format, kept up to date bucket by bucket.
pub(crate) struct IndexRender {
    format: Format,
    exposition: Exposition,
    headers: Vec<Bytes>,
    headers_gz: Option<Vec<gzip_parts::Part>>,
    buckets: Vec<Bucket>,
    overview: Bytes,
    overview_gz: Option<gzip_parts::Part>,
    /// The last update changed the overview.
    overview_moved: bool,
    /// Changes noted and not rendered yet (everything before the first
    /// update).
    pending: Changes,
    /// Buckets keep only their gzip form (the index part outgrew
    /// `plain_limit`).
    compact: bool,
    plain_limit: usize,
}

impl IndexRender {
    /// An empty render of `format`; [`IndexRender::update`] fills it.
    pub(crate) fn new(
        format: Format,
        exposition: Exposition,
    ) -> Result<IndexRender, std::fmt::Error> {
        Ok(IndexRender {
            format,
            exposition,
            headers: row_headers(format, exposition)?,
            headers_gz: None,
            buckets: (0..BUCKETS).map(|_| Bucket::default()).collect(),
            overview: Bytes::new(),
            overview_gz: None,
            overview_moved: false,
            pending: Changes::everything(),
            compact: false,
            plain_limit: PLAIN_KEPT_UP_TO,
        })
    }

    /// Sets the size past which the plain text is dropped.
    pub(crate) fn with_plain_limit(mut self, limit: usize) -> IndexRender {
        self.plain_limit = limit;
        self
    }

    /// Whether buckets keep only their gzip form: a plain body is then
    /// decompressed from [`IndexRender::gz_parts`].
    pub(crate) fn is_compact(&self) -> bool {
        self.compact
    }

    /// Notes which lock keys changed (from [`Shared::changes`]); the next
    /// [`IndexRender::update`] renders their buckets.
    pub(crate) fn note(&mut self, changes: &Changes) {
        self.pending.merge(changes);
    }

    /// Whether changes wait for an update.
    pub(crate) fn is_current(&self) -> bool {
        self.pending.is_empty() && !self.exposition.lock_age
    }

    /// Brings the buckets of the noted changes up to the index at `now`;
    /// returns how many buckets were encoded again. Each bucket's rows are
    /// copied under its own short read lock: a writer waits for one
    /// bucket, never for the fleet.
    pub(crate) fn update(
        &mut self,
        shared: &Arc<Shared>,
        now: SystemTime,
    ) -> Result<usize, std::fmt::Error> {
        let changes = self.pending.take();
        // Ages move with the clock: with them on, every bucket is redrawn.
        if changes.all() || self.exposition.lock_age {
            let mut keys: Vec<HashSet<LockKey>> = (0..BUCKETS).map(|_| HashSet::new()).collect();
            shared.read(|ix| {
                ix.for_each_shown_key(|k| {
                    keys[bucket_of(k)].insert(k.clone());
                });
            });
            for (bucket, keys) in self.buckets.iter_mut().zip(keys) {
                bucket.keys = keys;
                bucket.dirty = true;
            }
        } else {
            for key in changes.keys() {
                let bucket = &mut self.buckets[bucket_of(key)];
                bucket.keys.insert(key.clone());
                bucket.dirty = true;
            }
        }
        let mut encoded = 0;
        let mut plain: usize = self.buckets.iter().map(Bucket::plain_len).sum();
        let was_compact = self.compact;
        for b in 0..self.buckets.len() {
            let bucket = &mut self.buckets[b];
            if !bucket.dirty {
                continue;
            }
            bucket.dirty = false;
            let mut rows = Rows::default();
            shared.read(|ix| {
                bucket.keys.retain(|k| rows.push_key(ix, k, now));
            });
            rows.sort();
            let lines = encode_rows(rows, self.format, self.exposition)?;
            if lines.len() != self.headers.len() {
                // Every family writes its HELP line: anything else would
                // put lines under another family's header.
                return Err(std::fmt::Error);
            }
            let new_len: usize = lines.iter().map(Bytes::len).sum();
            plain = plain - bucket.plain_len() + new_len;
            if self.compact {
                let hashes = hash_lines(&lines);
                if hashes == bucket.hashes && bucket.gz.is_some() {
                    continue;
                }
                bucket.gz = Some(compress_lines(&lines).map_err(|_| std::fmt::Error)?);
                bucket.hashes = hashes;
                bucket.lines = Vec::new();
                encoded += 1;
            } else if lines != bucket.lines {
                bucket.lines = lines;
                bucket.gz = None;
                encoded += 1;
            }
            if !self.compact && plain > self.plain_limit {
                // Outgrown, maybe part-way through a first render: keep
                // each bucket compressed only from here on, so no more
                // than the limit of plain text is ever held.
                for bucket in &mut self.buckets {
                    if bucket.gz.is_none() {
                        bucket.gz =
                            Some(compress_lines(&bucket.lines).map_err(|_| std::fmt::Error)?);
                    }
                    bucket.hashes = hash_lines(&bucket.lines);
                    bucket.lines = Vec::new();
                }
                self.compact = true;
            }
        }
        if was_compact && self.compact && plain < self.plain_limit / 2 {
            // Shrunk well below: plain again, from a whole render (the
            // halved limit keeps a fleet at the edge from flapping).
            self.compact = false;
            for bucket in &mut self.buckets {
                bucket.hashes = Vec::new();
                bucket.gz = None;
            }
            self.pending.mark_all();
            return Ok(encoded + self.update(shared, now)?);
        }
        let per_class: [(HolderClass, u64); 5] = shared.read(|ix| ix.held_per_class());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(OverviewCollector {
            per_class,
            version: shared.version,
        }));
        let overview = Bytes::from(super::parts::encode(&registry, self.format, 4096)?);
        self.overview_moved = overview != self.overview;
        if self.overview_moved {
            self.overview = overview;
            self.overview_gz = None;
        }
        Ok(encoded)
    }

    /// Whether the last update changed the overview families.
    pub(crate) fn overview_moved(&self) -> bool {
        self.overview_moved
    }

    /// The index part's text as chunks: per family its header, then every
    /// bucket's lines of it; then the overview.
    pub(crate) fn chunks(&self) -> Option<Vec<Bytes>> {
        if self.compact {
            return None;
        }
        let mut out = Vec::with_capacity(self.headers.len() * (BUCKETS + 1) + 1);
        for (f, header) in self.headers.iter().enumerate() {
            out.push(header.clone());
            for b in &self.buckets {
                if let Some(lines) = b.lines.get(f).filter(|l| !l.is_empty()) {
                    out.push(lines.clone());
                }
            }
        }
        out.push(self.overview.clone());
        Some(out)
    }

    /// Compresses what is not compressed yet; returns how many parts.
    pub(crate) fn compress(&mut self) -> std::io::Result<usize> {
        let mut n = 0;
        if self.headers_gz.is_none() {
            self.headers_gz = Some(compress_lines(&self.headers)?);
            n += self.headers.len();
        }
        for b in &mut self.buckets {
            if b.gz.is_none() {
                b.gz = Some(compress_lines(&b.lines)?);
                n += 1;
            }
        }
        if self.overview_gz.is_none() {
            self.overview_gz = Some(gzip_parts::part(&self.overview, false)?);
            n += 1;
        }
        Ok(n)
    }

    /// The compressed parts in body order (after [`IndexRender::compress`]).
    pub(crate) fn gz_parts(&self) -> Option<Vec<&gzip_parts::Part>> {
        let headers = self.headers_gz.as_ref()?;
        let mut out = Vec::with_capacity(headers.len() * (BUCKETS + 1) + 1);
        for (f, header) in headers.iter().enumerate() {
            out.push(header);
            for b in &self.buckets {
                let part = b.gz.as_ref()?.get(f)?;
                if part.plain_len() > 0 {
                    out.push(part);
                }
            }
        }
        out.push(self.overview_gz.as_ref()?);
        Some(out)
    }

    /// Whether a gzip form exists for every part.
    pub(crate) fn compressed(&self) -> bool {
        self.headers_gz.is_some()
            && self.overview_gz.is_some()
            && self.buckets.iter().all(|b| b.gz.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_of_a_key_is_fixed_and_spread() {
        let key = |ns: &str, suffix: &str| LockKey::new(ns, suffix);
        assert_eq!(bucket_of(&key("ns", "a-m")), bucket_of(&key("ns", "a-m")));
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            seen.insert(bucket_of(&key("ns", &format!("{i:016x}-m"))));
        }
        assert_eq!(seen.len(), BUCKETS, "1000 keys reach every bucket");
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        let spread: std::collections::HashSet<_> = (0..64)
            .map(|i| {
                let ns = format!("n{i}");
                (
                    bucket_of(&key(&format!("{ns}a"), "b")),
                    bucket_of(&key(&ns, "ab")),
                )
            })
            .collect();
        assert!(spread.iter().any(|(a, b)| a != b));
    }

    #[test]
    fn families_split_at_their_help_lines() {
        let text = "# HELP a x\n# TYPE a gauge\na 1\na{b=\"#\"} 2\n# HELP c y\n# TYPE c counter\n# HELP d z\n# TYPE d gauge\nd 3\n";
        let parts = split_families(text);
        let h: Vec<&str> = parts.iter().map(|(h, _)| &text[h.clone()]).collect();
        let s: Vec<&str> = parts.iter().map(|(_, s)| &text[s.clone()]).collect();
        assert_eq!(
            h,
            [
                "# HELP a x\n# TYPE a gauge\n",
                "# HELP c y\n# TYPE c counter\n",
                "# HELP d z\n# TYPE d gauge\n"
            ]
        );
        assert_eq!(s, ["a 1\na{b=\"#\"} 2\n", "", "d 3\n"]);
    }
}
