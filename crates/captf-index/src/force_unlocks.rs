//! Force-unlock counters, per object, from CAPTF's ForceUnlocked Events.
//!
//! Each distinct Event counts once, and each later increase of its
//! `series.count` again, at most [`MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE`] per
//! update. Events already present when a watch first lists are history:
//! they set the last-seen time but are not counted, or a restart would
//! count them twice. A counter outlives its object only while a stored
//! Event still names it.

use std::collections::{HashMap, HashSet};

use super::entries::{ForceUnlockEvent, ForceUnlocks};
use super::keys::{LockKey, ObjectKey, ObjectRef};
use captf_core::kind::Kind;
use captf_core::suffix::state_suffix;

/// Most force-unlocks one Event update may add to a counter. CAPTF emits
/// each ForceUnlocked Event once, without a series (every Job names a new
/// related object), so a real update adds 1; a series count that jumps
/// further is a bad or hostile Event and must not move the counter by
/// billions. Alerts fire on any increase, so capping the size of one
/// increase never hides a page. See docs/decisions/exporter.md.
pub const MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE: u64 = 10;

/// The force-unlock sub-index.
#[derive(Debug, Default)]
pub struct ForceUnlockIndex {
    /// Occurrences counted so far per Event.
    events: HashMap<ObjectKey, ForceUnlockEvent>,
    /// Event watch scopes whose first list is done.
    baselined: HashSet<String>,
    counters: HashMap<ObjectRef, ForceUnlocks>,
    /// How many stored Events name each object.
    refs: HashMap<ObjectRef, usize>,
    /// The counters of each lock, by the lock its object's name gives. A
    /// lock Lease that outlives its object (deletionPolicy Retain) may be
    /// shown under another name (its owner-name label is a hash when the
    /// name is over 63 bytes): its deletion finds the counter here.
    by_lock: HashMap<LockKey, HashSet<ObjectRef>>,
}

/// The lock an object's counter belongs to; None for a kind that is not a
/// Terraform* kind (no lock).
fn lock_of(obj: &ObjectRef) -> Option<LockKey> {
    let kind = Kind::from_kind(&obj.kind)?;
    Some(LockKey::new(
        &obj.namespace,
        state_suffix(&obj.namespace, kind, &obj.name),
    ))
}

/// The lock whose counter an Event moves; None for a kind without a lock.
pub fn lock_of_regarding(ev: &ForceUnlockEvent) -> Option<LockKey> {
    lock_of(&regarding(ev))
}

fn regarding(ev: &ForceUnlockEvent) -> ObjectRef {
    ObjectRef::new(&ev.namespace, &ev.kind, &ev.name)
}

impl ForceUnlockIndex {
    /// Stores an Event seen on a live watch (it counts).
    /// `known` says whether an object still exists (for counter cleanup).
    pub fn apply(
        &mut self,
        key: ObjectKey,
        ev: ForceUnlockEvent,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) -> bool {
        if self.events.get(&key) == Some(&ev) {
            return false;
        }
        self.store(key, ev, true, known);
        true
    }

    /// Forgets an Event (deleted or expired); returns whether it was kept.
    pub fn delete(&mut self, key: &ObjectKey, known: &dyn Fn(&ObjectRef) -> bool) -> bool {
        match self.events.remove(key) {
            Some(old) => {
                self.release(regarding(&old), known);
                true
            }
            None => false,
        }
    }

    /// The end of a (re)list of Events in `scope`: Events gone from the list
    /// are forgotten; listed ones count only when this scope has listed
    /// before (a first list is history).
    pub fn reset(
        &mut self,
        scope: Option<&str>,
        items: Vec<(ObjectKey, ForceUnlockEvent)>,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) {
        let scope_name = scope.unwrap_or("").to_string();
        let counting = self.baselined.contains(&scope_name);
        let listed: HashSet<&ObjectKey> = items.iter().map(|(k, _)| k).collect();
        let stale: Vec<ObjectKey> = self
            .events
            .keys()
            .filter(|k| scope.is_none_or(|s| s == k.namespace) && !listed.contains(k))
            .cloned()
            .collect();
        for key in stale {
            self.delete(&key, known);
        }
        for (key, ev) in items {
            self.store(key, ev, counting, known);
        }
        self.baselined.insert(scope_name);
    }

    fn store(
        &mut self,
        key: ObjectKey,
        ev: ForceUnlockEvent,
        counting: bool,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) {
        let previous = self.events.get(&key);
        let before = previous.map(|e| e.occurrences);
        let old_ref = previous.map(regarding);
        let new_ref = regarding(&ev);
        if old_ref.as_ref() != Some(&new_ref) {
            *self.refs.entry(new_ref.clone()).or_default() += 1;
            if let Some(old) = old_ref {
                self.release(old, known);
            }
        }
        let added = match before {
            Some(b) => ev.occurrences.saturating_sub(b),
            None if counting => ev.occurrences,
            None => 0,
        }
        .min(MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
        if !self.counters.contains_key(&new_ref) {
            if let Some(lock) = lock_of(&new_ref) {
                self.by_lock
                    .entry(lock)
                    .or_default()
                    .insert(new_ref.clone());
            }
        }
        let counter = self.counters.entry(new_ref).or_default();
        counter.total = counter.total.saturating_add(added);
        if let Some(t) = ev.last_seen {
            counter.last_seen = Some(counter.last_seen.map_or(t, |c: f64| c.max(t)));
        }
        let occurrences = before.map_or(ev.occurrences, |b| b.max(ev.occurrences));
        self.events
            .insert(key, ForceUnlockEvent { occurrences, ..ev });
    }

    fn release(&mut self, obj: ObjectRef, known: &dyn Fn(&ObjectRef) -> bool) {
        if let Some(n) = self.refs.get_mut(&obj) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.refs.remove(&obj);
                self.gc(&obj, known);
            }
        }
    }

    /// Drops the counter of an object that is gone and that no stored Event
    /// names any more, so deleted objects leave no series behind.
    pub fn gc(&mut self, obj: &ObjectRef, known: &dyn Fn(&ObjectRef) -> bool) {
        if self.refs.contains_key(obj) || known(obj) {
            return;
        }
        if self.counters.remove(obj).is_some() {
            if let Some(lock) = lock_of(obj) {
                if let Some(set) = self.by_lock.get_mut(&lock) {
                    set.remove(obj);
                    if set.is_empty() {
                        self.by_lock.remove(&lock);
                    }
                }
            }
        }
    }

    /// [`ForceUnlockIndex::gc`] for every counter of `lock`, whatever name
    /// the lock is shown under.
    pub fn gc_lock(&mut self, lock: &LockKey, known: &dyn Fn(&ObjectRef) -> bool) {
        let objs: Vec<ObjectRef> = self
            .by_lock
            .get(lock)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for obj in objs {
            self.gc(&obj, known);
        }
    }

    /// The counter of an object (zero when none was seen).
    pub fn of(&self, obj: &ObjectRef) -> ForceUnlocks {
        self.counters.get(obj).copied().unwrap_or_default()
    }

    /// The lock whose counter the stored Event `key` moved.
    pub fn lock_of_event(&self, key: &ObjectKey) -> Option<LockKey> {
        self.events.get(key).and_then(lock_of_regarding)
    }

    /// The counters of one lock, by the names their Events give.
    pub fn of_lock(&self, lock: &LockKey) -> impl Iterator<Item = (&ObjectRef, ForceUnlocks)> {
        self.by_lock
            .get(lock)
            .into_iter()
            .flatten()
            .filter_map(|obj| Some((obj, *self.counters.get(obj)?)))
    }

    /// Every counter, known object or not.
    pub fn counters(&self) -> impl Iterator<Item = (&ObjectRef, &ForceUnlocks)> {
        self.counters.iter()
    }
}
