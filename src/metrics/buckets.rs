//! The index part of the exposition in buckets, each rendered only when
//! its rows changed, so that a change costs about one bucket's render
//! instead of the fleet's (kube-state-metrics keeps per-object series for
//! the same reason).
//!
//! Every row (a held lock, a known object, a force-unlock counter) belongs
//! to one of [`BUCKETS`] buckets by a fixed hash of its (namespace, kind,
//! name) labels. Per bucket the renderer keeps a fingerprint of its rows
//! and, per metric family, the sample lines it encoded for them. After an
//! index change it copies the rows out of the index (one short read
//! lock), fingerprints them per bucket, and encodes again only the buckets
//! whose fingerprint moved. A body is, per family, its HELP/TYPE lines and
//! then every bucket's lines of that family in bucket order, then the
//! overview families: chunks of shared bytes, no copy. The encoder is
//! prometheus-client's, so each line is what a whole render would write.
//!
//! gzip: each (bucket, family) block is compressed on its own as a part of
//! one DEFLATE stream ([`super::gzip_parts`]), so a change recompresses one
//! bucket too.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::gzip_parts;
use super::snapshot::{FuRow, LockRow, ObjectRow, Snapshot};
use super::{families, Exposition, Format};
use crate::core::classify::HolderClass;
use crate::shared::Shared;

/// Buckets of the index part. More make a change cheaper and the gzip
/// body larger (each block is compressed on its own, without the history
/// of the blocks before it). Measured at 10k objects: the gzip body is
/// 219 kB compressed whole, 376 kB in 16 buckets, 597 kB in 64; 16 make a
/// change cost a sixteenth of a whole render.
pub(crate) const BUCKETS: usize = 16;

/// The bucket of a row's (namespace, kind, name): FNV-1a, fixed across
/// runs and versions, so the body's order is too.
fn bucket_of(ns: &str, kind: &str, name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [ns, kind, name] {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h % BUCKETS as u64) as usize
}

fn hash_f64(h: &mut DefaultHasher, x: f64) {
    x.to_bits().hash(h);
}

impl LockRow {
    /// The age moves with the clock: it counts only when it is exported.
    fn fingerprint(&self, h: &mut DefaultHasher, with_age: bool) {
        (&self.ns, self.kind, &self.name, self.class.as_str()).hash(h);
        (&self.operation, &self.holder, &self.lock_id, &self.version).hash(h);
        (
            self.age_source,
            self.overdue,
            self.created.map(f64::to_bits),
        )
            .hash(h);
        hash_f64(h, self.base);
        if with_age {
            hash_f64(h, self.age);
        }
    }
}

impl ObjectRow {
    fn fingerprint(&self, h: &mut DefaultHasher) {
        (
            &self.ns,
            self.kind,
            &self.name,
            self.held,
            self.timeout,
            self.deadline,
        )
            .hash(h);
        (self.condition, self.job_active, self.mismatch, &self.plans).hash(h);
    }
}

impl FuRow {
    fn fingerprint(&self, h: &mut DefaultHasher) {
        (&self.ns, &self.kind, &self.name, self.fu.total).hash(h);
        self.fu.last_seen.map(f64::to_bits).hash(h);
    }
}

/// The rows of one bucket, in the snapshot's order.
#[derive(Debug, Default)]
struct BucketRows {
    locks: Vec<LockRow>,
    objects: Vec<ObjectRow>,
    force_unlocks: Vec<FuRow>,
}

impl BucketRows {
    fn fingerprint(&self, with_age: bool) -> u64 {
        let mut h = DefaultHasher::new();
        self.locks.len().hash(&mut h);
        for r in &self.locks {
            r.fingerprint(&mut h, with_age);
        }
        self.objects.len().hash(&mut h);
        for r in &self.objects {
            r.fingerprint(&mut h);
        }
        self.force_unlocks.len().hash(&mut h);
        for r in &self.force_unlocks {
            r.fingerprint(&mut h);
        }
        h.finish()
    }
}

/// Splits a snapshot into its buckets and its overview.
fn partition(snap: Snapshot) -> (Vec<BucketRows>, [(HolderClass, u64); 5]) {
    let mut buckets: Vec<BucketRows> = (0..BUCKETS).map(|_| BucketRows::default()).collect();
    for r in snap.locks {
        buckets[bucket_of(&r.ns, r.kind, &r.name)].locks.push(r);
    }
    for r in snap.objects {
        buckets[bucket_of(&r.ns, r.kind, &r.name)].objects.push(r);
    }
    for r in snap.force_unlocks {
        buckets[bucket_of(&r.ns, &r.kind, &r.name)]
            .force_unlocks
            .push(r);
    }
    (buckets, snap.per_class)
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

/// Per family (in encoding order): its header lines and its sample lines.
/// Every family starts with its `# HELP` line, rows or not.
fn split_families(text: &str) -> (Vec<String>, Vec<String>) {
    let mut headers: Vec<String> = Vec::new();
    let mut samples: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("# HELP ") {
            headers.push(String::new());
            samples.push(String::new());
        }
        match (
            line.starts_with('#'),
            headers.last_mut(),
            samples.last_mut(),
        ) {
            (true, Some(h), _) => h.push_str(line),
            (false, _, Some(s)) => s.push_str(line),
            // Nothing comes before the first HELP line.
            _ => {}
        }
    }
    (headers, samples)
}

/// Encodes rows: per family, the sample lines (no header lines).
fn encode_rows(
    rows: BucketRows,
    format: Format,
    exposition: Exposition,
) -> Result<Vec<Bytes>, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RowsCollector { rows, exposition }));
    let text = super::parts::encode(&registry, format, 64 * 1024)?;
    let (_, samples) = split_families(&text);
    Ok(samples.into_iter().map(Bytes::from).collect())
}

/// The header lines of every per-row family, in order.
fn row_headers(format: Format, exposition: Exposition) -> Result<Vec<Bytes>, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RowsCollector {
        rows: BucketRows::default(),
        exposition,
    }));
    let text = super::parts::encode(&registry, format, 64 * 1024)?;
    let (headers, _) = split_families(&text);
    Ok(headers.into_iter().map(Bytes::from).collect())
}

/// Encodes the per-row families of one bucket's rows.
#[derive(Debug)]
struct RowsCollector {
    rows: BucketRows,
    exposition: Exposition,
}

impl Collector for RowsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        families::encode_locks(&mut enc, &self.rows.locks, self.exposition)?;
        families::encode_objects(&mut enc, &self.rows.objects)?;
        families::encode_force_unlocks(&mut enc, &self.rows.force_unlocks)
    }
}

/// One bucket as rendered: its fingerprint, its lines per family, and
/// those compressed once a gzip body was asked for.
struct Bucket {
    fingerprint: Option<u64>,
    lines: Vec<Bytes>,
    gz: Option<Vec<gzip_parts::Part>>,
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
            buckets: (0..BUCKETS)
                .map(|_| Bucket {
                    fingerprint: None,
                    lines: Vec::new(),
                    gz: None,
                })
                .collect(),
            overview: Bytes::new(),
            overview_gz: None,
            overview_moved: false,
        })
    }

    /// Brings the render up to the index at `now`; returns how many
    /// buckets were encoded again.
    pub(crate) fn update(
        &mut self,
        shared: &Arc<Shared>,
        now: SystemTime,
    ) -> Result<usize, std::fmt::Error> {
        let snap = super::snapshot::take(shared, now);
        let (rows, per_class) = partition(snap);
        let mut encoded = 0;
        for (bucket, rows) in self.buckets.iter_mut().zip(rows) {
            let fp = rows.fingerprint(self.exposition.lock_age);
            if bucket.fingerprint == Some(fp) {
                continue;
            }
            bucket.lines = encode_rows(rows, self.format, self.exposition)?;
            if bucket.lines.len() != self.headers.len() {
                // Every family writes its HELP line: anything else would
                // put lines under another family's header.
                return Err(std::fmt::Error);
            }
            bucket.fingerprint = Some(fp);
            bucket.gz = None;
            encoded += 1;
        }
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
    pub(crate) fn chunks(&self) -> Vec<Bytes> {
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
        out
    }

    /// Compresses what is not compressed yet; returns how many parts.
    pub(crate) fn compress(&mut self) -> std::io::Result<usize> {
        let mut n = 0;
        if self.headers_gz.is_none() {
            self.headers_gz = Some(
                self.headers
                    .iter()
                    .map(|h| gzip_parts::part(h, false))
                    .collect::<std::io::Result<_>>()?,
            );
            n += self.headers.len();
        }
        for b in &mut self.buckets {
            if b.gz.is_none() {
                b.gz = Some(
                    b.lines
                        .iter()
                        .map(|l| gzip_parts::part(l, false))
                        .collect::<std::io::Result<_>>()?,
                );
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
                let lines = b.lines.get(f)?;
                if lines.is_empty() {
                    continue;
                }
                out.push(b.gz.as_ref()?.get(f)?);
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
    fn the_bucket_of_a_name_is_fixed_and_spread() {
        assert_eq!(
            bucket_of("ns", "TerraformMachine", "web"),
            bucket_of("ns", "TerraformMachine", "web")
        );
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            seen.insert(bucket_of("ns", "TerraformMachine", &format!("m-{i}")));
        }
        assert_eq!(seen.len(), BUCKETS, "1000 names reach every bucket");
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            bucket_of("ab", "c", "x") * BUCKETS + bucket_of("a", "bc", "x"),
            bucket_of("ab", "c", "x") * (BUCKETS + 1)
        );
    }

    #[test]
    fn families_split_at_their_help_lines() {
        let text = "# HELP a x\n# TYPE a gauge\na 1\na{b=\"#\"} 2\n# HELP c y\n# TYPE c counter\n# HELP d z\n# TYPE d gauge\nd 3\n";
        let (h, s) = split_families(text);
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
