//! Every lock key's lines, kept per bucket and family: a lock key belongs
//! to one of [`BUCKETS`] buckets by a fixed hash, and an index change
//! renders and compresses again the buckets of the keys it names, whole.
//! Scrapes share an immutable [`Snapshot`] of the buffers; a plain body is
//! sent from them as they are, a gzip body from their compressed forms.

use std::time::SystemTime;

use bytes::Bytes;

use super::families::{headers, shown, KEY_FAMILIES};
use super::gzip::{Head, Piece};
use super::render::{render_key, Ends, Shown};
use super::{families, Exposition, Format};
use crate::index::{Changes, LockKey};
use crate::shared::Shared;

/// Buckets of the body. A change renders and compresses one again, so
/// more make a change cheaper and the gzip body larger (each bucket's
/// lines are compressed without the history of the ones before).
pub(super) const BUCKETS: usize = 16;

/// Most text kept plain. Past it (about 25k objects) a bucket keeps only
/// its compressed form and a plain scrape inflates it while sending: at
/// 100k objects the text is 61 MB, which kept plain takes the exporter to
/// 221 MiB at rest against the chart's 256 MiB limit
/// (docs/decisions/exposition-by-key.md).
const PLAIN_KEPT_UP_TO: usize = 16 * 1024 * 1024;

/// Keys rendered under one hold of the index's read lock: a writer waits
/// for this many, never for a bucket.
const KEYS_PER_READ: usize = 256;

/// The bucket of a lock key: FNV-1a of (namespace, state suffix), fixed
/// across runs and versions, so the body's order is too. A lock, its
/// object and the object's counters share the key, hence the bucket.
pub(super) fn bucket_of(key: &LockKey) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [key.namespace.as_str(), key.suffix.as_str()] {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h % BUCKETS as u64) as usize
}

/// One bucket's lines of every family, compressed, and plain while the
/// text is within [`PLAIN_KEPT_UP_TO`].
#[derive(Clone, Debug, Default)]
pub(super) struct Bucket {
    pub(super) lines: Option<Vec<Bytes>>,
    pub(super) gzip: Vec<Piece>,
}

/// What a body is sent from; immutable, shared by the scrapes.
#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    pub(super) buckets: Vec<Bucket>,
    pub(super) overview: Bytes,
    pub(super) exposition: Exposition,
    /// Per format, what every gzip body of this snapshot starts with.
    pub(super) gzip_heads: [Head; 2],
}

/// What one [`Store::update`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Updated {
    /// Buckets rendered again.
    pub(super) buckets: usize,
    /// Keys rendered in them.
    pub(super) keys: usize,
}

/// The lines of every key, kept current from the index's changes.
#[derive(Debug)]
pub(super) struct Store {
    buckets: Vec<Bucket>,
    overview: Bytes,
    exposition: Exposition,
    pending: Changes,
    plain_limit: usize,
}

impl Store {
    /// An empty store; its first update renders every key.
    pub(super) fn new(exposition: Exposition) -> Store {
        Store {
            buckets: vec![Bucket::default(); BUCKETS],
            overview: Bytes::new(),
            exposition,
            pending: Changes::everything(),
            plain_limit: PLAIN_KEPT_UP_TO,
        }
    }

    /// The same with another limit of the text kept plain (tests).
    #[cfg(test)]
    pub(super) fn with_plain_limit(mut self, limit: usize) -> Store {
        self.plain_limit = limit;
        self
    }

    /// Notes keys whose series changed, for the next update.
    pub(super) fn note(&mut self, changes: &Changes) {
        self.pending.merge(changes);
    }

    /// Whether no change waits to be rendered.
    pub(super) fn is_current(&self) -> bool {
        self.pending.is_empty()
    }

    /// Renders and compresses again, at `now`, every bucket holding a
    /// noted key.
    pub(super) fn update(&mut self, shared: &Shared, now: SystemTime) -> Updated {
        let changes = self.pending.take();
        let mut touched = [changes.all(); BUCKETS];
        for key in changes.keys() {
            touched[bucket_of(key)] = true;
        }
        // The keys of the touched buckets, in one pass: a noted key the
        // index no longer shows is not among them, so it leaves the body.
        let mut keys: Vec<Vec<LockKey>> = vec![Vec::new(); BUCKETS];
        let any = touched.contains(&true);
        if any {
            shared.read(|ix| {
                ix.for_each_shown_key(|k| {
                    let b = bucket_of(k);
                    if touched[b] {
                        keys[b].push(k.clone());
                    }
                });
            });
        }
        let mut done = Updated::default();
        for (b, keys) in keys.into_iter().enumerate() {
            if touched[b] {
                done.buckets += 1;
                done.keys += keys.len();
                let lines = render_bucket(shared, &keys, now, self.exposition);
                let gzip = compress(&lines);
                self.buckets[b] = Bucket {
                    lines: Some(lines),
                    gzip,
                };
            }
        }
        let text: usize = self
            .buckets
            .iter()
            .flat_map(|b| &b.gzip)
            .map(Piece::plain_len)
            .sum();
        if text > self.plain_limit {
            self.buckets.iter_mut().for_each(|b| b.lines = None);
        }
        if any {
            let per_class = shared.read(|ix| ix.held_per_class());
            self.overview = Bytes::from(families::overview(&per_class, crate::VERSION));
        }
        done
    }

    /// The lines as they are now, for scrapes to share.
    pub(super) fn snapshot(&self) -> Snapshot {
        let overview = Piece::stored(&self.overview, false);
        let head = |format| gzip_head(&self.buckets, &overview, self.exposition, format);
        Snapshot {
            buckets: self.buckets.clone(),
            overview: self.overview.clone(),
            exposition: self.exposition,
            gzip_heads: [head(Format::OpenMetrics), head(Format::Prometheus)],
        }
    }
}

/// Per family, the lines of `keys` in body order (namespace, kind, name,
/// then the suffix to break ties).
fn render_bucket(
    shared: &Shared,
    keys: &[LockKey],
    now: SystemTime,
    exposition: Exposition,
) -> Vec<Bytes> {
    // Every key's lines go to one buffer, then are copied out family by
    // family, in order, into another: two allocations a bucket, one freed
    // whole, so that rendering leaves no holes among long-lived ones.
    let mut buf = Vec::with_capacity(keys.len() * 640);
    let mut placed: Vec<(Shown, &str, usize, Ends)> = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(KEYS_PER_READ) {
        shared.read(|ix| {
            for key in chunk {
                let start = buf.len();
                if let Some((shown, ends)) = render_key(ix, key, now, exposition, &mut buf) {
                    placed.push((shown, key.suffix.as_str(), start, ends));
                }
            }
        });
    }
    placed.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut out = Vec::with_capacity(buf.len());
    let mut ends = [0; KEY_FAMILIES.len()];
    for (f, end) in ends.iter_mut().enumerate() {
        for (_, _, start, key_ends) in &placed {
            let from = if f == 0 { *start } else { key_ends[f - 1] };
            out.extend_from_slice(&buf[from..key_ends[f]]);
        }
        *end = out.len();
    }
    let out = Bytes::from(out);
    let starts = std::iter::once(0).chain(ends);
    starts.zip(ends).map(|(s, e)| out.slice(s..e)).collect()
}

/// Everything of a gzip body in `format` but the health part: per shown
/// family its header and every bucket's compressed lines, then the
/// overview. Made once per snapshot.
fn gzip_head(buckets: &[Bucket], overview: &Piece, exposition: Exposition, format: Format) -> Head {
    let mut pieces = Vec::with_capacity(KEY_FAMILIES.len() * (BUCKETS + 1) + 1);
    for (f, (_, header)) in headers(format).iter().enumerate() {
        if shown(f, exposition) {
            pieces.push(header);
            pieces.extend(buckets.iter().filter_map(|b| b.gzip.get(f)));
        }
    }
    pieces.push(overview);
    Head::new(pieces)
}

/// A bucket's lines compressed per family (stored as they are if the
/// compressor fails, which costs size, not the scrape).
fn compress(lines: &[Bytes]) -> Vec<Piece> {
    let piece = |l: &Bytes| {
        Piece::compressed(l).unwrap_or_else(|e| {
            tracing::error!(error = %e, "compressing the exposition failed; sent stored");
            Piece::stored(l, false)
        })
    };
    lines.iter().map(piece).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_of_a_key_is_fixed_and_spread() {
        let key = |ns: &str, suffix: &str| LockKey::new(ns, suffix);
        // The hash is part of the body's order: it must not move.
        assert_eq!(bucket_of(&key("ns", "a-m")), bucket_of(&key("ns", "a-m")));
        let seen: std::collections::HashSet<usize> = (0..1000)
            .map(|i| bucket_of(&key("ns", &format!("{i:016x}-m"))))
            .collect();
        assert_eq!(seen.len(), BUCKETS, "1000 keys reach every bucket");
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert!((0..64).any(|i| {
            let ns = format!("n{i}");
            bucket_of(&key(&format!("{ns}a"), "b")) != bucket_of(&key(&ns, "ab"))
        }));
    }
}
