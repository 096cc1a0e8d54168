//! Which bucket a lock key's lines live in: a keyed hash of the key, as
//! many buckets as the keys that render need, and a bucket's keys packed
//! in one allocation. The store ([`super::store`]) keeps the lines.

use std::hash::{BuildHasher as _, RandomState};

use crate::index::LockKey;

/// Keys a bucket is sized for. A change renders one bucket again (500 to
/// 1,000 keys, a few milliseconds); smaller buckets make a change cheaper
/// but the gzip body larger and a scrape's chunks more (each piece is
/// compressed without the names before it); larger ones slow the scrapes
/// a change meets (docs/decisions/flat-cost.md).
pub(super) const KEYS_PER_BUCKET: usize = 1024;

/// The fewest buckets (as a power of two): small fleets keep 16.
pub(super) const MIN_BITS: u32 = 4;

/// Most text kept plain. Past it a bucket keeps only its compressed form
/// and a plain scrape inflates it while sending; below it a plain scrape
/// costs what sending it does (the fleet sizes this covers:
/// docs/decisions/flat-cost.md).
pub(super) const PLAIN_KEPT_UP_TO: usize = 128 * 1024 * 1024;

/// Keys rendered under one hold of the index's read lock.
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
    /// Keys rendered under one hold of the index's read lock: a writer
    /// waits for this many, never for a bucket.
    pub(super) keys_per_read: usize,
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
            keys_per_read: KEYS_PER_READ,
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
pub(super) fn bits_for(keys: usize, per: usize) -> u32 {
    let buckets = keys.div_ceil(per.max(1)).max(1).next_power_of_two();
    buckets.trailing_zeros().max(MIN_BITS)
}

/// A bucket's keys, packed in one allocation (namespace and suffix, each
/// after its length), in body order.
#[derive(Clone, Debug, Default)]
pub(super) struct Keys {
    packed: Box<[u8]>,
    pub(super) count: usize,
}

impl Keys {
    pub(super) fn pack<'a>(keys: impl Iterator<Item = &'a LockKey>) -> Keys {
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

    pub(super) fn unpack(&self, out: &mut Vec<LockKey>) {
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
