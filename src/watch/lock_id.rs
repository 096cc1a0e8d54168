//! What is kept of a lock ID: an untrusted string of any size, cut to a
//! bounded form that still tells IDs apart.

use crate::core::shown::cut_with_digest;

/// Longest lock ID (`spec.holderIdentity`, lock-info `ID`) kept as
/// written. The backends write a UUID (36 bytes) into both; the Lease's
/// writer can put up to the object's limit (1.5 MiB) into holderIdentity
/// and the annotations' (256 KiB) into the ID, kept per Lease for as long
/// as it exists. A longer ID is kept cut ([`keep_lock_id`]).
pub const MAX_LOCK_ID_BYTES: usize = 1024;

/// What is kept of a lock ID: the ID itself up to [`MAX_LOCK_ID_BYTES`],
/// else its head (up to that many bytes), `…` and its length and sha256.
///
/// Nothing a verdict reads changes: a cut ID is as non-empty as the whole
/// one (held), two IDs are equal exactly when what is kept of them is
/// (the length and hash tell IDs with one head apart, so a new lock is
/// still a new lock), the `lock_id` label is the first 128 bytes (the
/// head's), and a cut ID is longer than any ID kept whole, so no ID
/// written as such can pass for it. Only the commands need the whole ID:
/// they read it from the Lease ([`lock_id_cut`]).
pub fn keep_lock_id(id: &str) -> String {
    cut_with_digest(id, MAX_LOCK_ID_BYTES).into_owned()
}

/// Whether a kept lock ID is a cut one ([`keep_lock_id`]): the commands
/// then read the whole ID from the Lease instead of printing it.
pub fn lock_id_cut(kept: &str) -> bool {
    kept.len() > MAX_LOCK_ID_BYTES
}

/// The head and whole length (bytes) of a cut lock ID
/// ([`keep_lock_id`]); None for an ID kept whole.
pub fn cut_lock_id_parts(kept: &str) -> Option<(&str, usize)> {
    if !lock_id_cut(kept) {
        return None;
    }
    let (head, rest) = kept.rsplit_once("…[cut: ")?;
    let len = rest.split_once(' ')?.0.parse().ok()?;
    Some((head, len))
}
