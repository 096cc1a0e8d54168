//! Lock Leases, what the index derives about each, and the links from a
//! holder pod to the locks it holds.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use super::entries::{AgeSource, LockLease};
use super::keys::{LockKey, ObjectKey};
use captf_core::classify::HolderClass;

/// What the index derives about a lock; never taken from the Lease.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LockState {
    /// Holder class while held.
    pub class: Option<HolderClass>,
    /// When this exporter first saw this lock ID held.
    pub first_seen_held: Option<SystemTime>,
    /// The overdue warning for this lock ID was logged.
    pub overdue_logged: bool,
}

/// A lock Lease and its derived state.
#[derive(Clone, Debug, PartialEq)]
pub struct Lock {
    /// The trimmed Lease.
    pub lease: LockLease,
    /// Derived by the index.
    pub state: LockState,
}

impl Lock {
    /// Age at `now` and its source; None when not held.
    pub fn age(&self, now: SystemTime) -> Option<(f64, AgeSource)> {
        self.lease
            .age(now, self.state.first_seen_held, self.state.class)
    }
}

/// The lock sub-index.
#[derive(Debug, Default)]
pub struct LockIndex {
    locks: HashMap<LockKey, Lock>,
    /// Locks per holder pod, for pod-driven reclassification and live
    /// reads. Only holders that pass CAPTF's own-pod recognition are linked:
    /// a workstation host can never be an own runner pod, so it is never
    /// read.
    by_holder: HashMap<ObjectKey, HashSet<LockKey>>,
    /// The holder pod each linked lock is linked to.
    holder_of: HashMap<LockKey, ObjectKey>,
    /// The locks whose Lease is held (one in ten at fleet scale): what the
    /// page walks instead of every lock.
    held: HashSet<LockKey>,
    /// Held locks per class, in [`HolderClass::ALL`] order, kept as locks
    /// come, go and change class: every render reads them, and counting
    /// 10,000 held locks at 100k cost more than the render itself.
    per_class: [u64; 5],
}

/// The slot of `class` in [`HolderClass::ALL`].
fn slot(class: HolderClass) -> usize {
    HolderClass::ALL
        .iter()
        .position(|c| *c == class)
        .unwrap_or_default()
}

impl LockIndex {
    /// Room for `n` locks in all, so a first list grows the table once
    /// instead of doubling it (with the old and new table both held at
    /// each step).
    pub fn reserve_total(&mut self, n: usize) {
        self.locks.reserve(n.saturating_sub(self.locks.len()));
    }

    /// Stores a lock, unlinked; returns the lock it replaced.
    pub fn insert(&mut self, key: LockKey, lock: Lock) -> Option<Lock> {
        let old = self.remove(&key);
        if lock.lease.is_held() {
            self.held.insert(key.clone());
            self.count(lock.state.class, 1);
        }
        self.locks.insert(key, lock);
        old
    }

    /// Removes a lock and its holder link.
    pub fn remove(&mut self, key: &LockKey) -> Option<Lock> {
        let old = self.locks.remove(key)?;
        if self.held.remove(key) {
            self.count(old.state.class, -1);
        }
        self.unlink(key);
        Some(old)
    }

    /// Sets a lock's class (the only way it changes: the counts follow).
    pub fn set_class(&mut self, key: &LockKey, class: Option<HolderClass>) {
        let held = self.held.contains(key);
        let Some(lock) = self.locks.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut lock.state.class, class);
        if held && old != class {
            self.count(old, -1);
            self.count(class, 1);
        }
    }

    fn count(&mut self, class: Option<HolderClass>, delta: i64) {
        if let Some(class) = class {
            let n = &mut self.per_class[slot(class)];
            *n = n.saturating_add_signed(delta);
        }
    }

    /// Held locks per class, in [`HolderClass::ALL`] order.
    pub fn held_per_class(&self) -> [(HolderClass, u64); 5] {
        std::array::from_fn(|i| (HolderClass::ALL[i], self.per_class[i]))
    }

    /// Links a lock to its own runner pod (replacing any earlier link).
    pub fn link(&mut self, key: &LockKey, pod: ObjectKey) {
        if self.holder_of.get(key) == Some(&pod) {
            return;
        }
        self.unlink(key);
        self.by_holder
            .entry(pod.clone())
            .or_default()
            .insert(key.clone());
        self.holder_of.insert(key.clone(), pod);
    }

    /// Drops a lock's holder link, if any.
    pub fn unlink(&mut self, key: &LockKey) {
        let Some(pod) = self.holder_of.remove(key) else {
            return;
        };
        if let Some(set) = self.by_holder.get_mut(&pod) {
            set.remove(key);
            if set.is_empty() {
                self.by_holder.remove(&pod);
            }
        }
    }

    /// A lock.
    pub fn get(&self, key: &LockKey) -> Option<&Lock> {
        self.locks.get(key)
    }

    /// A lock, for the index to update its derived state (its class
    /// through [`LockIndex::set_class`]).
    pub fn get_mut(&mut self, key: &LockKey) -> Option<&mut Lock> {
        self.locks.get_mut(key)
    }

    /// Whether a lock has this key.
    pub fn contains(&self, key: &LockKey) -> bool {
        self.locks.contains_key(key)
    }

    /// Every lock.
    pub fn iter(&self) -> impl Iterator<Item = (&LockKey, &Lock)> {
        self.locks.iter()
    }

    /// Every lock whose Lease is held, in no order.
    pub fn held(&self) -> impl Iterator<Item = (&LockKey, &Lock)> {
        self.held.iter().filter_map(|k| self.locks.get_key_value(k))
    }

    /// Lease keys of the locks in `scope` (all namespaces when None).
    pub fn lease_keys(&self, scope: Option<&str>) -> Vec<ObjectKey> {
        self.locks
            .values()
            .filter(|l| scope.is_none_or(|s| s == l.lease.namespace))
            .map(|l| ObjectKey::new(&l.lease.namespace, l.lease.lease_name()))
            .collect()
    }

    /// The locks a holder pod holds.
    pub fn held_by(&self, pod: &ObjectKey) -> Vec<LockKey> {
        self.by_holder
            .get(pod)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The own runner pod a lock is linked to, if any.
    pub fn holder(&self, key: &LockKey) -> Option<&ObjectKey> {
        self.holder_of.get(key)
    }

    /// Every lock linked to an own runner pod.
    pub fn linked(&self) -> impl Iterator<Item = &LockKey> {
        self.holder_of.keys()
    }

    /// Whether some lock names this pod as its holder.
    pub fn is_holder(&self, pod: &ObjectKey) -> bool {
        self.by_holder.contains_key(pod)
    }

    /// Every pod some lock names as its holder.
    pub fn holders(&self) -> impl Iterator<Item = &ObjectKey> {
        self.by_holder.keys()
    }

    /// Number of lock Leases.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// No lock Lease known.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}
