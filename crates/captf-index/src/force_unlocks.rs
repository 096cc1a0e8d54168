//! Force-unlock counters, per object, from CAPTF's ForceUnlocked Events.
//!
//! Each distinct Event counts once, and each later increase of its
//! `series.count` again, at most [`MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE`] per
//! update. Events already present when a watch first lists are history:
//! they set the last-seen time but are not counted, or a restart would
//! count them twice. A counter outlives its object only while a stored
//! Event still names it.
//!
//! Events about objects the index does not know are kept (their object may
//! come later: the Events' first list often arrives before the objects'),
//! but at most [`MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE`] per namespace:
//! whoever may create Events could otherwise fill the memory with Events
//! about objects that never exist. Past it they are dropped, and the write
//! says how many ([`crate::Effects::events_dropped`]). While the exporter
//! starts, a live Event may pass the cap (at most
//! [`MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING`] in all): the Event of a
//! real force-unlock may come before its object is listed, and a cap
//! filled beforehand must not hide it.

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

/// Most Events kept per namespace about objects the index does not know
/// (when they came, and still). CAPTF writes one Event per force-unlock
/// of an object that exists, and kube-apiserver keeps Events for an hour:
/// a namespace has far fewer about objects that are gone or not yet
/// listed. About 3 KiB each with their counters and this bookkeeping
/// (names of 253 bytes; tests/hostile_memory.rs).
pub const MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE: usize = 256;

/// Most live Events about unknown objects kept past their namespace's cap
/// while the exporter starts ([`crate::Index::begin_start`] until every
/// watch has synced), over all namespaces and the whole run: a real
/// force-unlock's Event may come on the live watch before its object's
/// Lease or Terraform* object is listed. About 12 MiB at most (3 KiB each).
pub const MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING: usize = 4096;

/// The stored Events of one namespace whose object was unknown when they
/// came, by that object; forgotten when the object becomes known.
#[derive(Debug, Default)]
struct UnknownObjects {
    events: usize,
    by_object: HashMap<ObjectRef, HashSet<ObjectKey>>,
}

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
    /// Per namespace, the stored Events about objects not known: at most
    /// [`MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE`], and those let past it
    /// while starting.
    unknown: HashMap<String, UnknownObjects>,
    /// Live Events let past their namespace's cap while starting, ever (a
    /// deleted one does not give its place back: the bound is on the run).
    passed_cap_while_starting: usize,
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

/// Whether an Event about an unknown object may pass its namespace's cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    /// It may not.
    Held,
    /// A live Event while starting: it may, within
    /// [`MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING`].
    PassableWhileStarting,
}

/// What came of storing one Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Stored (or the same as stored): counted as it says.
    Kept,
    /// About an object not known, in a namespace that holds the most such
    /// Events already: not kept (an earlier version of it is forgotten).
    Dropped,
}

impl ForceUnlockIndex {
    /// Stores an Event seen on a live watch (it counts); None when it is
    /// the one stored already. `known` says whether an object exists (for
    /// counter cleanup, and the cap on Events about unknown objects);
    /// `starting`: not every watch has synced, so an unknown object may
    /// only not be listed yet, and the Event may pass a full cap.
    pub fn apply(
        &mut self,
        key: ObjectKey,
        ev: ForceUnlockEvent,
        starting: bool,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) -> Option<Stored> {
        if self.events.get(&key) == Some(&ev) {
            return None;
        }
        let cap = if starting {
            Cap::PassableWhileStarting
        } else {
            Cap::Held
        };
        Some(self.store(key, ev, true, cap, known))
    }

    /// Forgets an Event (deleted or expired); returns whether it was kept.
    pub fn delete(&mut self, key: &ObjectKey, known: &dyn Fn(&ObjectRef) -> bool) -> bool {
        match self.events.remove(key) {
            Some(old) => {
                let obj = regarding(&old);
                self.unflag(&obj, key);
                self.release(obj, known);
                true
            }
            None => false,
        }
    }

    /// The objects of `lock` are known now (its object or its Lease came):
    /// their Events no longer count against their namespace's cap.
    pub fn now_known(&mut self, lock: &LockKey) {
        let Some(unknown) = self.unknown.get_mut(&lock.namespace) else {
            return;
        };
        for obj in self.by_lock.get(lock).into_iter().flatten() {
            if let Some(keys) = unknown.by_object.remove(obj) {
                unknown.events = unknown.events.saturating_sub(keys.len());
            }
        }
        if unknown.events == 0 {
            self.unknown.remove(&lock.namespace);
        }
    }

    /// Stored Events about objects not known, in `namespace`.
    pub fn unknown_kept(&self, namespace: &str) -> usize {
        self.unknown.get(namespace).map_or(0, |u| u.events)
    }

    /// Forgets that the stored Event `key` is about the unknown `obj`.
    fn unflag(&mut self, obj: &ObjectRef, key: &ObjectKey) {
        let Some(unknown) = self.unknown.get_mut(&obj.namespace) else {
            return;
        };
        if let Some(keys) = unknown.by_object.get_mut(obj) {
            if keys.remove(key) {
                unknown.events = unknown.events.saturating_sub(1);
            }
            if keys.is_empty() {
                unknown.by_object.remove(obj);
            }
        }
        if unknown.events == 0 {
            self.unknown.remove(&obj.namespace);
        }
    }

    /// Counts the Event `key` about the unknown `obj` against its
    /// namespace's cap; false when the namespace is full and `cap` does not
    /// let it pass.
    fn flag(&mut self, obj: &ObjectRef, key: &ObjectKey, cap: Cap) -> bool {
        let unknown = self.unknown.entry(obj.namespace.clone()).or_default();
        if unknown.events >= MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE {
            let passes = cap == Cap::PassableWhileStarting
                && self.passed_cap_while_starting < MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING;
            if !passes {
                return false;
            }
            self.passed_cap_while_starting += 1;
        }
        let keys = unknown.by_object.entry(obj.clone()).or_default();
        if keys.insert(key.clone()) {
            unknown.events += 1;
        }
        true
    }

    /// The end of a (re)list of Events in `scope`: Events gone from the list
    /// are forgotten; listed ones count only when this scope has listed
    /// before (a first list is history).
    /// Returns how many listed Events were dropped (the cap on Events
    /// about unknown objects).
    pub fn reset(
        &mut self,
        scope: Option<&str>,
        items: Vec<(ObjectKey, ForceUnlockEvent)>,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) -> u64 {
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
        let mut dropped = 0;
        for (key, ev) in items {
            // A listed Event never passes the cap: a list brings every
            // Event of the last hour at once, an attacker's too.
            if self.store(key, ev, counting, Cap::Held, known) == Stored::Dropped {
                dropped += 1;
            }
        }
        self.baselined.insert(scope_name);
        dropped
    }

    fn store(
        &mut self,
        key: ObjectKey,
        ev: ForceUnlockEvent,
        counting: bool,
        cap: Cap,
        known: &dyn Fn(&ObjectRef) -> bool,
    ) -> Stored {
        let new_ref = regarding(&ev);
        let old_ref = self.events.get(&key).map(regarding);
        if let Some(old) = &old_ref {
            self.unflag(old, &key);
        }
        if !known(&new_ref) && !self.flag(&new_ref, &key, cap) {
            // What was stored of it (about another object, or counted
            // before its namespace filled) goes too: no half-kept Event.
            self.delete(&key, known);
            return Stored::Dropped;
        }
        let previous = self.events.get(&key);
        let before = previous.map(|e| e.occurrences);
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
        Stored::Kept
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
