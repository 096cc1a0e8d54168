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
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::families::{headers, KEY_FAMILIES};
use super::gzip::{Chunk, Deflater, Head, Piece};
use super::render::{render_key, Ends, Shown};
use super::{families, Exposition, Format};
use crate::index::{Changes, LockKey};
use crate::shared::Shared;

/// Keys a bucket is sized for. A change renders one bucket again (500 to
/// 1,000 keys, a few milliseconds); smaller buckets make a change cheaper
/// but the gzip body larger and a scrape's chunks more (each piece is
/// compressed without the names before it); larger ones slow the scrapes
/// a change meets (docs/decisions/flat-cost.md).
pub(super) const KEYS_PER_BUCKET: usize = 1024;

/// The fewest buckets (as a power of two): small fleets keep 16.
const MIN_BITS: u32 = 4;

/// Most text kept plain. Past it (about 200k objects) a bucket keeps only
/// its compressed form and a plain scrape inflates it while sending: at
/// 100k objects the text is about 61 MB, kept plain so that a plain scrape
/// costs what sending it does (docs/decisions/flat-cost.md).
const PLAIN_KEPT_UP_TO: usize = 128 * 1024 * 1024;

/// Keys rendered under one hold of the index's read lock: a writer waits
/// for this many, never for a bucket.
const KEYS_PER_READ: usize = 256;

/// How lock keys are spread over buckets.
#[derive(Clone, Debug)]
pub(super) enum KeyHash {
    /// SipHash-1-3 under a key drawn when the process starts: whoever
    /// names Leases cannot choose names that crowd one bucket (every
    /// change in a bucket renders all of it again).
    Keyed(RandomState),
    /// The same function in every run and build (FNV-1a, mixed): a body
    /// in a known order, for tests and goldens.
    Fixed,
}

impl KeyHash {
    /// The hash of a lock key. A lock, its object and the object's
    /// counters share the key, hence the bucket.
    pub(super) fn of(&self, key: &LockKey) -> u64 {
        match self {
            KeyHash::Keyed(state) => state.hash_one((&key.namespace, &key.suffix)),
            KeyHash::Fixed => fixed_hash(key),
        }
    }
}

/// FNV-1a of (namespace, state suffix), mixed (MurmurHash3's finaliser)
/// so that its high bits, which pick the bucket, are spread.
fn fixed_hash(key: &LockKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [key.namespace.as_str(), key.suffix.as_str()] {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// How a store is sized and keyed: the production values by default;
/// tests pass others in.
#[derive(Clone, Debug)]
pub(super) struct Sizing {
    /// Keys a bucket is sized for.
    pub(super) keys_per_bucket: usize,
    /// Most text kept plain.
    pub(super) plain_limit: usize,
    /// As many buckets as this (as a power of two) whatever the keys: a
    /// store compared with another must group keys alike.
    pub(super) fixed_bits: Option<u32>,
    pub(super) hash: KeyHash,
}

impl Default for Sizing {
    fn default() -> Sizing {
        Sizing {
            keys_per_bucket: KEYS_PER_BUCKET,
            plain_limit: PLAIN_KEPT_UP_TO,
            fixed_bits: None,
            hash: KeyHash::Keyed(RandomState::new()),
        }
    }
}

impl Sizing {
    /// The production sizes with the fixed hash: a body in a known order.
    pub(super) fn fixed() -> Sizing {
        Sizing {
            hash: KeyHash::Fixed,
            ..Sizing::default()
        }
    }
}

/// The bucket of a key's hash among `1 << bits` (its top bits: each
/// bucket is a range of hashes, in order).
pub(super) fn bucket_of(hash: u64, bits: u32) -> usize {
    usize::try_from(hash >> (64 - bits)).unwrap_or(0)
}

/// The buckets (as a power of two) for `keys` keys at `per` a bucket.
fn bits_for(keys: usize, per: usize) -> u32 {
    let buckets = keys.div_ceil(per.max(1)).max(1).next_power_of_two();
    buckets.trailing_zeros().max(MIN_BITS)
}

/// One bucket: its lines of every family, compressed, and plain while the
/// text is within [`PLAIN_KEPT_UP_TO`]; and the keys they show.
#[derive(Clone, Debug, Default)]
pub(super) struct Bucket {
    pub(super) lines: Option<Vec<Bytes>>,
    pub(super) gzip: Vec<Piece>,
    keys: Keys,
}

/// A bucket's keys, packed in one allocation (namespace and suffix, each
/// after its length), in body order.
#[derive(Clone, Debug, Default)]
struct Keys {
    packed: Box<[u8]>,
    count: usize,
}

impl Keys {
    fn pack<'a>(keys: impl Iterator<Item = &'a LockKey>) -> Keys {
        let mut packed = Vec::new();
        let mut count = 0;
        for key in keys {
            for part in [&key.namespace, &key.suffix] {
                packed.extend_from_slice(&(part.len() as u32).to_le_bytes());
                packed.extend_from_slice(part.as_bytes());
            }
            count += 1;
        }
        Keys {
            packed: packed.into_boxed_slice(),
            count,
        }
    }

    fn unpack(&self, out: &mut Vec<LockKey>) {
        let mut rest = &self.packed[..];
        let mut part = || {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
            let (text, tail) = tail.split_at_checked(len)?;
            rest = tail;
            String::from_utf8(text.to_vec()).ok()
        };
        while let (Some(namespace), Some(suffix)) = (part(), part()) {
            out.push(LockKey { namespace, suffix });
        }
    }
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
    pub(super) fn update(&mut self, shared: &Shared, now: SystemTime) -> Updated {
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
    /// ones (a noted key the index no longer shows leaves the body).
    fn render_noted(&mut self, shared: &Shared, changes: &Changes, now: SystemTime) -> Updated {
        let mut noted: BTreeMap<usize, Vec<LockKey>> = BTreeMap::new();
        for key in changes.keys() {
            let b = self.bucket_of(key);
            noted.entry(b).or_default().push(key.clone());
        }
        let mut done = Updated::default();
        for (b, mut keys) in noted {
            let Some(old) = self.buckets.get(b) else {
                continue;
            };
            old.keys.unpack(&mut keys);
            keys.sort_unstable();
            keys.dedup();
            let bucket = self.render_bucket(shared, &keys, now);
            done.buckets += 1;
            done.keys += keys.len();
            self.buckets[b] = Arc::new(bucket);
        }
        done
    }

    /// One bucket of `keys` (those the index shows), per family in body
    /// order (namespace, kind, name, then the suffix to break ties).
    fn render_bucket(&mut self, shared: &Shared, keys: &[LockKey], now: SystemTime) -> Bucket {
        // Every key's lines go to one buffer, then are copied out family by
        // family, in order, into another: two allocations a bucket, one freed
        // whole, so that rendering leaves no holes among long-lived ones.
        let mut buf = Vec::with_capacity(keys.len() * 640);
        let mut placed: Vec<(Shown, &LockKey, usize, Ends)> = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_READ) {
            shared.read(|ix| {
                for key in chunk {
                    let start = buf.len();
                    if let Some((shown, ends)) = render_key(ix, key, now, self.exposition, &mut buf)
                    {
                        placed.push((shown, key, start, ends));
                    }
                }
            });
        }
        placed.sort_unstable_by(|a, b| (&a.0, &a.1.suffix).cmp(&(&b.0, &b.1.suffix)));
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
        let keys = Keys::pack(placed.iter().map(|p| p.1));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_has_one_bucket_and_keys_reach_every_bucket() {
        let key = |ns: &str, suffix: &str| LockKey::new(ns, suffix);
        let keys: Vec<LockKey> = (0..4000)
            .map(|i| key("ns", &format!("{i:016x}-m")))
            .collect();
        for bits in [MIN_BITS, 6, 8] {
            let seen: std::collections::HashSet<usize> = keys
                .iter()
                .map(|k| bucket_of(fixed_hash(k), bits))
                .collect();
            assert_eq!(
                seen.len(),
                1 << bits,
                "4000 keys reach all {} buckets",
                1 << bits
            );
        }
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(fixed_hash(&key("ab", "c")), fixed_hash(&key("a", "bc")));
        let keyed = KeyHash::Keyed(RandomState::new());
        assert_ne!(keyed.of(&key("ab", "c")), keyed.of(&key("a", "bc")));
    }

    #[test]
    fn buckets_are_sized_for_the_keys() {
        assert_eq!(bits_for(0, 256), MIN_BITS);
        assert_eq!(bits_for(16 * 256, 256), MIN_BITS);
        assert_eq!(bits_for(16 * 256 + 1, 256), MIN_BITS + 1);
        assert_eq!(bits_for(100_000, 1024), 7);
        assert_eq!(bits_for(1_000_000, 1024), 10);
    }

    #[test]
    fn packed_keys_unpack_as_they_were() {
        let keys = [
            LockKey::new("ns", "0123456789abcdef-m"),
            LockKey::new("", ""),
            LockKey::new("é\0", "x"),
        ];
        let mut back = Vec::new();
        Keys::pack(keys.iter()).unpack(&mut back);
        assert_eq!(back, keys);
        assert_eq!(Keys::pack(keys.iter()).count, 3);
    }
}
