//! Which locks' series changed: what the exposition renderer re-reads.
//!
//! Every write of the index that changes what `/metrics` shows marks the
//! lock key whose rows it moved (a lock, its object, the object's
//! force-unlock counter, pending plans and verdict all hang off one key),
//! or marks everything when a change reaches rows it cannot name cheaply
//! (a TerraformCluster's or CAPI Cluster's timeouts, a relist of Events).
//! The renderer then encodes only the buckets of the marked keys, so a
//! change costs in proportion to what changed, not to the fleet.

use std::collections::HashSet;

use super::LockKey;

/// More marked keys than this are kept as "everything": past it, a full
/// render is cheaper than carrying the set (a first list of a large fleet).
pub const MAX_MARKED_KEYS: usize = 16 * 1024;

/// Lock keys whose series changed, or everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    all: bool,
    keys: HashSet<LockKey>,
}

impl Changes {
    /// Everything changed: what a renderer that has drawn nothing yet needs.
    pub fn everything() -> Changes {
        Changes {
            all: true,
            keys: HashSet::new(),
        }
    }

    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }

    /// Every row may have changed.
    pub fn all(&self) -> bool {
        self.all
    }

    /// The marked keys (none when [`Changes::all`]).
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.keys.iter()
    }

    /// Whether the render these changes start redraws `key`.
    pub fn covers(&self, key: &LockKey) -> bool {
        self.all || self.keys.contains(key)
    }

    /// Marks one key.
    pub fn mark(&mut self, key: &LockKey) {
        if self.all || self.keys.contains(key) {
            return;
        }
        if self.keys.len() >= MAX_MARKED_KEYS {
            self.mark_all();
            return;
        }
        self.keys.insert(key.clone());
    }

    /// Marks everything.
    pub fn mark_all(&mut self) {
        self.all = true;
        self.keys = HashSet::new();
    }

    /// Adds what `other` marked.
    pub fn merge(&mut self, other: &Changes) {
        if other.all {
            self.mark_all();
            return;
        }
        for key in &other.keys {
            self.mark(key);
        }
    }

    /// What was marked; leaves nothing marked.
    pub fn take(&mut self) -> Changes {
        std::mem::take(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_collapse_to_everything_past_the_cap() {
        let mut c = Changes::default();
        assert!(c.is_empty());
        c.mark(&LockKey::new("ns", "a"));
        c.mark(&LockKey::new("ns", "a"));
        assert_eq!(c.keys().count(), 1);
        assert!(!c.all());
        for i in 0..MAX_MARKED_KEYS {
            c.mark(&LockKey::new("ns", format!("k{i}")));
        }
        assert!(c.all(), "past the cap the set becomes everything");
        assert_eq!(c.keys().count(), 0);
        let taken = c.take();
        assert!(taken.all() && c.is_empty());
    }

    #[test]
    fn merging_keeps_every_key_and_everything_wins() {
        let mut a = Changes::default();
        a.mark(&LockKey::new("ns", "a"));
        let mut b = Changes::default();
        b.mark(&LockKey::new("ns", "b"));
        a.merge(&b);
        let mut keys: Vec<_> = a.keys().map(|k| k.suffix.clone()).collect();
        keys.sort();
        assert_eq!(keys, ["a", "b"]);
        a.merge(&Changes::everything());
        assert!(a.all());
    }
}
