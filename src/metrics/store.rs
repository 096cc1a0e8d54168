//! Every lock key's lines, kept per bucket and family.
//!
//! A lock key's bucket is a range of its hash, and there are as many
//! buckets as the fleet needs for about [`KEYS_PER_BUCKET`] keys each (a
//! power of two, at least 16): a change renders and compresses again the
//! buckets of the keys it names, a bounded number of keys at any fleet
//! size. Each bucket remembers its keys, so an update reads the index for
//! those alone. Each family lists its keys bucket by bucket, in name order
//! within a bucket (neighbouring names compress well). Scrapes share an
//! immutable [`Snapshot`]: a plain body is sent from the lines as they are,
//! a gzip body from their compressed forms.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use bytes::Bytes;

use super::buckets::bucket_of;
pub(super) use super::buckets::Sizing;
use super::buckets::{bits_for, Keys, MIN_BITS};
use super::gzip::{Chunk, Deflater, Head, Piece};
use super::key_families::{headers, KEY_FAMILIES};
use super::render::{render_key, Ends, Shown};
use super::{families, Exposition, Format};
use crate::index::{Changes, LockKey};
use crate::shared::Shared;

/// One bucket: its lines of every family, compressed, and plain while the
/// text is within [`PLAIN_KEPT_UP_TO`]; and the keys they show.
#[derive(Clone, Debug, Default)]
pub(super) struct Bucket {
    pub(super) lines: Option<Vec<Bytes>>,
    pub(super) gzip: Vec<Piece>,
    keys: Keys,
}

/// What a body is sent from; immutable, shared by the scrapes.
#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    /// The buckets it was made from (tests look at them).
    #[cfg(test)]
    pub(super) buckets: Vec<Arc<Bucket>>,
    /// Per format, the plain body but the health part, and its length.
    plain: [(Arc<Vec<Chunk>>, usize); 2],
    /// Per format, what every gzip body of this snapshot starts with.
    pub(super) gzip_heads: [Head; 2],
}

impl Snapshot {
    /// The chunks of the plain body in `format` but its health part, and
    /// their length.
    pub(super) fn plain(&self, format: Format) -> (Arc<Vec<Chunk>>, usize) {
        self.plain[format.slot()].clone()
    }
}

/// What one [`Store::update`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Updated {
    /// Buckets rendered again.
    pub(super) buckets: usize,
    /// Keys rendered in them.
    pub(super) keys: usize,
}

/// What `sink` marked since it was last taken; leaves it empty.
fn take(sink: &Mutex<Changes>) -> Changes {
    sink.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Keys' lines as read from the index, before they become a bucket: one
/// buffer, and per key that has lines its shown name, its place among the
/// keys drawn, where its lines start and where each family's end.
struct Drawn {
    buf: Vec<u8>,
    placed: Vec<(Shown, usize, usize, Ends)>,
}

impl Drawn {
    fn new(keys: usize) -> Drawn {
        Drawn {
            buf: Vec::with_capacity(keys * 640),
            placed: Vec::with_capacity(keys),
        }
    }

    /// Reads the lines of `keys[range]` from `ix`.
    fn draw(
        &mut self,
        ix: &crate::index::Index,
        keys: &[LockKey],
        range: std::ops::Range<usize>,
        now: SystemTime,
        exposition: Exposition,
    ) {
        for i in range {
            let start = self.buf.len();
            if let Some((shown, ends)) = render_key(ix, &keys[i], now, exposition, &mut self.buf) {
                self.placed.push((shown, i, start, ends));
            }
        }
    }
}

/// A bucket holding noted keys.
struct Noted {
    bucket: usize,
    /// The keys it showed and the noted ones, sorted.
    keys: Vec<LockKey>,
    noted: Vec<LockKey>,
    /// Whether it showed any of the noted keys.
    shown_before: bool,
}

/// The lines of every key, kept current from the index's changes.
#[derive(Debug)]
pub(super) struct Store {
    buckets: Vec<Arc<Bucket>>,
    /// There are `1 << bits` buckets.
    bits: u32,
    sizing: Sizing,
    overview: Bytes,
    exposition: Exposition,
    pending: Changes,
    deflater: Deflater,
    /// Whether buckets rendered now keep their plain lines (the text was
    /// within the limit at the last update).
    keep_plain: bool,
}

impl Store {
    /// An empty store; its first update renders every key.
    pub(super) fn new(exposition: Exposition, sizing: Sizing) -> Store {
        Store {
            buckets: Vec::new(),
            bits: sizing.fixed_bits.unwrap_or(MIN_BITS),
            sizing,
            overview: Bytes::new(),
            exposition,
            pending: Changes::everything(),
            deflater: Deflater::new(),
            keep_plain: true,
        }
    }

    /// How many buckets there are (tests).
    #[cfg(test)]
    pub(super) fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// The buckets, as a power of two (tests).
    #[cfg(test)]
    pub(super) fn bits(&self) -> u32 {
        self.bits
    }

    /// The bucket `key` is in now.
    pub(super) fn bucket_of(&self, key: &LockKey) -> usize {
        bucket_of(self.sizing.hash.of(key), self.bits)
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
    /// noted key; everything, in buckets sized anew, when everything was
    /// noted or the fleet outgrew its buckets (or shrank well below).
    pub(super) fn update(
        &mut self,
        shared: &Shared,
        sink: &Mutex<Changes>,
        now: SystemTime,
    ) -> Updated {
        self.note(&take(sink));
        let changes = self.pending.take();
        if changes.is_empty() {
            return Updated::default();
        }
        let mut done = match changes.all() {
            true => self.render_all(shared, now),
            false => self.render_noted(shared, &changes, now),
        };
        let buckets = self.sizing.keys_per_bucket << self.bits;
        let keys: usize = self.buckets.iter().map(|b| b.keys.count).sum();
        let resize = self.sizing.fixed_bits.is_none()
            && (keys > buckets * 2 || (self.bits > MIN_BITS && keys < buckets / 8));
        if resize && !changes.all() {
            done = self.render_all(shared, now);
        }
        // A write during the render marked keys in the sink. Their buckets
        // may hold two views of the index: a lock shown under a name that
        // another key's existence decides, drawn before the write and that
        // key after it, shows one label set twice. Drawn again under one
        // hold of the read lock, the snapshot is one view: every other key
        // was not written since it was drawn. Everything marked (an Event
        // relist, a flood past the mark cap) is rendered again bucket by
        // bucket instead: writers never wait for a whole fleet.
        let during = take(sink);
        if !during.is_empty() {
            let again = match during.all() {
                true => self.render_all(shared, now),
                false => self.render_noted_at_once(shared, &during, now),
            };
            done.buckets += again.buckets;
            done.keys += again.keys;
        }
        let text: usize = self
            .buckets
            .iter()
            .flat_map(|b| &b.gzip)
            .map(Piece::plain_len)
            .sum();
        self.keep_plain = text <= self.sizing.plain_limit;
        if !self.keep_plain {
            for bucket in self.buckets.iter_mut().filter(|b| b.lines.is_some()) {
                let mut compressed_only = Bucket::clone(bucket);
                compressed_only.lines = None;
                *bucket = Arc::new(compressed_only);
            }
        }
        let per_class = shared.read(|ix| ix.held_per_class());
        self.overview = Bytes::from(families::overview(&per_class, crate::VERSION));
        done
    }

    /// Every shown key, in buckets sized for the number that render lines
    /// (without idle objects, far fewer than the index shows).
    fn render_all(&mut self, shared: &Shared, now: SystemTime) -> Updated {
        let mut all = Vec::new();
        shared.read(|ix| ix.for_each_shown_key(|k| all.push(k.clone())));
        let mut done = self.regroup(shared, all, now);
        let rendered: usize = self.buckets.iter().map(|b| b.keys.count).sum();
        let fits = bits_for(rendered, self.sizing.keys_per_bucket);
        if self.sizing.fixed_bits.is_none() && fits < self.bits {
            // Sized for every key, most of which rendered nothing: sized
            // again for those that did, or every later update would find
            // the buckets too many and render everything again.
            let mut keys = Vec::with_capacity(rendered);
            for bucket in &self.buckets {
                bucket.keys.unpack(&mut keys);
            }
            let again = self.regroup(shared, keys, now);
            done.buckets += again.buckets;
            done.keys += again.keys;
        }
        done
    }

    /// `keys` in buckets sized for their number.
    fn regroup(&mut self, shared: &Shared, keys: Vec<LockKey>, now: SystemTime) -> Updated {
        let bits = bits_for(keys.len(), self.sizing.keys_per_bucket);
        self.bits = self.sizing.fixed_bits.unwrap_or(bits);
        let mut groups: Vec<Vec<LockKey>> = (0..1usize << self.bits).map(|_| Vec::new()).collect();
        for key in keys {
            groups[bucket_of(self.sizing.hash.of(&key), self.bits)].push(key);
        }
        self.buckets.clear();
        let mut done = Updated::default();
        for keys in groups {
            let bucket = self.render_bucket(shared, &keys, now);
            done.buckets += 1;
            done.keys += keys.len();
            self.buckets.push(Arc::new(bucket));
        }
        done
    }

    /// The buckets of the noted keys: the keys each showed, and the noted
    /// ones (a noted key the index no longer shows leaves the body). Each
    /// bucket reads the index a few hundred keys at a time, so writers
    /// wait for that many, not for a bucket. A bucket whose noted keys it
    /// did not show, and which still have nothing to say, is left as it
    /// is: a TerraformCluster's label flip notes every machine that
    /// inherits from it, and most of those are idle.
    fn render_noted(&mut self, shared: &Shared, changes: &Changes, now: SystemTime) -> Updated {
        let mut done = Updated::default();
        for noted in self.noted_buckets(changes) {
            if !noted.shown_before && self.all_silent(shared, &noted.noted, now) {
                continue;
            }
            let keys = noted.keys;
            let mut drawn = Drawn::new(keys.len());
            for chunk in (0..keys.len()).step_by(self.sizing.keys_per_read.max(1)) {
                let end = (chunk + self.sizing.keys_per_read.max(1)).min(keys.len());
                shared.read(|ix| drawn.draw(ix, &keys, chunk..end, now, self.exposition));
            }
            done.buckets += 1;
            done.keys += keys.len();
            self.buckets[noted.bucket] = Arc::new(self.finish(&keys, drawn));
        }
        done
    }

    /// Whether none of `keys` has a line to show (never, with idle objects
    /// shown: every known key has lines then).
    fn all_silent(&self, shared: &Shared, keys: &[LockKey], now: SystemTime) -> bool {
        if self.exposition.idle_objects {
            return false;
        }
        let mut scratch = Vec::new();
        keys.chunks(self.sizing.keys_per_read.max(1)).all(|chunk| {
            shared.read(|ix| {
                chunk.iter().all(|key| {
                    scratch.clear();
                    render_key(ix, key, now, self.exposition, &mut scratch).is_none()
                })
            })
        })
    }

    /// The same, every bucket under one hold of the read lock: one view of
    /// the index for all of them.
    fn render_noted_at_once(
        &mut self,
        shared: &Shared,
        changes: &Changes,
        now: SystemTime,
    ) -> Updated {
        let noted = self.noted_buckets(changes);
        let exposition = self.exposition;
        let drawn: Vec<Drawn> = shared.read(|ix| {
            let draw = |keys: &Vec<LockKey>| {
                let mut drawn = Drawn::new(keys.len());
                drawn.draw(ix, keys, 0..keys.len(), now, exposition);
                drawn
            };
            noted.iter().map(|n| draw(&n.keys)).collect()
        });
        let mut done = Updated::default();
        for (noted, drawn) in noted.into_iter().zip(drawn) {
            done.buckets += 1;
            done.keys += noted.keys.len();
            self.buckets[noted.bucket] = Arc::new(self.finish(&noted.keys, drawn));
        }
        done
    }

    /// The buckets holding noted keys, each with its keys and the noted
    /// ones, sorted.
    fn noted_buckets(&self, changes: &Changes) -> Vec<Noted> {
        let mut noted: BTreeMap<usize, Vec<LockKey>> = BTreeMap::new();
        for key in changes.keys() {
            let b = self.bucket_of(key);
            noted.entry(b).or_default().push(key.clone());
        }
        noted
            .into_iter()
            .filter_map(|(bucket, noted)| {
                let mut keys = Vec::new();
                self.buckets.get(bucket)?.keys.unpack(&mut keys);
                keys.sort_unstable();
                let shown_before = noted.iter().any(|k| keys.binary_search(k).is_ok());
                keys.extend(noted.iter().cloned());
                keys.sort_unstable();
                keys.dedup();
                Some(Noted {
                    bucket,
                    keys,
                    noted,
                    shown_before,
                })
            })
            .collect()
    }

    /// One bucket of `keys` (those the index shows), read a few hundred
    /// keys at a time.
    fn render_bucket(&mut self, shared: &Shared, keys: &[LockKey], now: SystemTime) -> Bucket {
        let mut drawn = Drawn::new(keys.len());
        let per = self.sizing.keys_per_read.max(1);
        for chunk in (0..keys.len()).step_by(per) {
            let end = (chunk + per).min(keys.len());
            shared.read(|ix| drawn.draw(ix, keys, chunk..end, now, self.exposition));
        }
        self.finish(keys, drawn)
    }

    /// A bucket from its drawn keys, per family in body order (namespace,
    /// kind, name, then the suffix to break ties), compressed.
    fn finish(&mut self, keys: &[LockKey], drawn: Drawn) -> Bucket {
        let Drawn { buf, mut placed } = drawn;
        placed.sort_unstable_by(|a, b| (&a.0, &keys[a.1].suffix).cmp(&(&b.0, &keys[b.1].suffix)));
        // Every key's lines went to one buffer, and are copied out family
        // by family, in order, into another: two allocations a bucket, one
        // freed whole, so that rendering leaves no holes among long-lived
        // ones.
        let mut out = Vec::with_capacity(buf.len());
        let mut ends = [0; KEY_FAMILIES.len()];
        for (f, end) in ends.iter_mut().enumerate() {
            for (.., start, key_ends) in &placed {
                let from = if f == 0 { *start } else { key_ends[f - 1] };
                out.extend_from_slice(&buf[from..key_ends[f]]);
            }
            *end = out.len();
        }
        let out = Bytes::from(out);
        let starts = std::iter::once(0).chain(ends);
        let lines: Vec<Bytes> = starts.zip(ends).map(|(s, e)| out.slice(s..e)).collect();
        let gzip = compress(&mut self.deflater, &lines);
        let keys = Keys::pack(placed.iter().map(|p| &keys[p.1]));
        Bucket {
            lines: self.keep_plain.then_some(lines),
            gzip,
            keys,
        }
    }

    /// The lines as they are now, for scrapes to share.
    pub(super) fn snapshot(&self) -> Snapshot {
        let overview = Piece::stored(&self.overview, false);
        let head = |format| gzip_head(&self.buckets, &overview, self.exposition, format);
        let plain = |format| plain_chunks(&self.buckets, &self.overview, self.exposition, format);
        Snapshot {
            #[cfg(test)]
            buckets: self.buckets.clone(),
            plain: [plain(Format::OpenMetrics), plain(Format::Prometheus)],
            gzip_heads: [head(Format::OpenMetrics), head(Format::Prometheus)],
        }
    }
}

/// Everything of a plain body in `format` but the health part: per shown
/// family its header and every bucket's lines (or compressed lines), then
/// the overview; and its length. Made once per snapshot.
fn plain_chunks(
    buckets: &[Arc<Bucket>],
    overview: &Bytes,
    exposition: Exposition,
    format: Format,
) -> (Arc<Vec<Chunk>>, usize) {
    let mut chunks = Vec::with_capacity(KEY_FAMILIES.len() * (buckets.len() + 1) + 1);
    for (f, (header, _)) in headers(format).iter().enumerate() {
        if KEY_FAMILIES[f].shown(exposition) {
            chunks.push(Chunk::Plain(header.clone()));
            for bucket in buckets {
                chunks.push(match (&bucket.lines, bucket.gzip.get(f)) {
                    (Some(lines), _) => Chunk::Plain(lines[f].clone()),
                    (None, Some(piece)) => Chunk::Deflated(piece.clone()),
                    (None, None) => Chunk::Plain(Bytes::new()),
                });
            }
        }
    }
    chunks.push(Chunk::Plain(overview.clone()));
    chunks.retain(|c| c.len() > 0);
    let len = chunks.iter().map(Chunk::len).sum();
    (Arc::new(chunks), len)
}

/// Everything of a gzip body in `format` but the health part: per shown
/// family its header and every bucket's compressed lines, then the
/// overview. Made once per snapshot.
fn gzip_head(
    buckets: &[Arc<Bucket>],
    overview: &Piece,
    exposition: Exposition,
    format: Format,
) -> Head {
    let mut pieces = Vec::with_capacity(KEY_FAMILIES.len() * (buckets.len() + 1) + 1);
    for (f, (_, header)) in headers(format).iter().enumerate() {
        if KEY_FAMILIES[f].shown(exposition) {
            pieces.push(header);
            pieces.extend(buckets.iter().filter_map(|b| b.gzip.get(f)));
        }
    }
    pieces.push(overview);
    Head::new(pieces)
}

/// A bucket's lines compressed per family (stored as they are if the
/// compressor fails, which costs size, not the scrape).
fn compress(deflater: &mut Deflater, lines: &[Bytes]) -> Vec<Piece> {
    let mut piece = |l: &Bytes| {
        deflater.piece(l).unwrap_or_else(|e| {
            tracing::error!(error = %e, "compressing the exposition failed; sent stored");
            Piece::stored(l, false)
        })
    };
    lines.iter().map(&mut piece).collect()
}
