//! The in-memory index: trimmed copies of the watched objects, joined by key.
//!
//! Split by concern, as the sub-indexes it owns:
//! - [`locks`]: lock Leases, their derived state, and holder-pod links;
//! - [`pods`]: the runner-pod cache and the live reads that confirm it;
//! - [`policy`]: Terraform* objects and CAPI Clusters, for names and
//!   effective timeouts;
//! - [`force_unlocks`]: per-object counters from ForceUnlocked Events.
//!
//! Watchers feed it through [`IndexResource`]: per resource type an
//! `apply`, a `delete` and a `reset` (the end of a list). The index joins
//! the sub-indexes, keeps holder classes up to date on every change (so a
//! transition is logged once, when it happens) and answers what `/metrics`
//! and the verifier ask. It does no I/O: it is tested with synthetic
//! objects and no runtime. Every join is a hash lookup.

mod entries;
pub mod force_unlocks;
mod keys;
pub mod locks;
pub mod pods;
pub mod policy;
mod resource;

use std::collections::HashSet;
use std::time::SystemTime;

pub use entries::{
    cap, unix_seconds, AgeSource, CapiCluster, ForceUnlockEvent, ForceUnlocks, LockLease, PodState,
    TerraformCluster, TfObject, MAX_LABEL_BYTES,
};
pub use force_unlocks::MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE;
pub use keys::{LockKey, ObjectKey, ObjectRef};
pub use locks::{Lock, LockState};
pub use pods::PodRead;
pub use resource::Resource;

use crate::core::classify::{classify, holder_of, is_overdue, Holder, HolderClass, PodEvidence};
use crate::core::kind::Kind;
use crate::core::suffix::{state_suffix, suffix_of_lock_lease};
use crate::core::timeouts::{effective, Effective, Resolved};

/// Now as Unix seconds.
pub fn unix_now() -> f64 {
    unix_seconds(SystemTime::now())
}

/// A lock whose holder class changed, for the log line.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassChange {
    /// Namespace of the lock.
    pub namespace: String,
    /// Kind of the lock's object.
    pub kind: &'static str,
    /// Name of the lock's object.
    pub name: String,
    /// Class before (None: not held).
    pub from: Option<HolderClass>,
    /// Class after (None: released).
    pub to: Option<HolderClass>,
    /// The holder (lock-info Who, capped).
    pub holder: String,
    /// Lock age in seconds, when held.
    pub age_seconds: Option<f64>,
}

/// Side effects a change asks of the caller: log lines and pods to read live.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// Locks whose class changed.
    pub class_changes: Vec<ClassChange>,
    /// Holder pods whose cached state says "not live" and that must be
    /// confirmed by a live read before a lock is called stale.
    pub confirm: Vec<ObjectKey>,
}

impl Effects {
    fn extend(&mut self, more: Effects) {
        self.class_changes.extend(more.class_changes);
        self.confirm.extend(more.confirm);
    }
}

/// How the watchers feed one resource type into the index, after kubert's
/// `IndexNamespacedResource`: typed, so an object can only land where it
/// belongs.
pub trait IndexResource<T> {
    /// What identifies one object of this type.
    type Key;
    /// What one watch of this type covers: a namespace, None for all (and,
    /// for Terraform* objects, the kind).
    type Scope;
    /// An object was added or changed.
    fn apply(&mut self, key: Self::Key, item: T, now: SystemTime) -> Effects;
    /// An object was deleted, or no longer passes the watch's filters.
    fn delete(&mut self, key: Self::Key, now: SystemTime) -> Effects;
    /// A (re)list of `scope` finished: `items` replace everything of this
    /// type there; what is missing was deleted while the watch was down.
    fn reset(
        &mut self,
        scope: &Self::Scope,
        items: Vec<(Self::Key, T)>,
        now: SystemTime,
    ) -> Effects;
}

/// The index. Not thread-safe by itself; the runtime wraps it in a lock.
#[derive(Debug, Default)]
pub struct Index {
    locks: locks::LockIndex,
    pods: pods::PodIndex,
    policy: policy::PolicyIndex,
    force_unlocks: force_unlocks::ForceUnlockIndex,
}

impl IndexResource<LockLease> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, lease: LockLease, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let Some(lock) = lock_key_of(&key) else {
            return fx;
        };
        let old = self.locks.remove(&lock);
        let old_class = old.as_ref().and_then(|l| l.state.class);
        // Keep the observed start of a lock across updates and relists of
        // the same lock, so an "observed" age does not restart.
        let same_lock = matches!(&old, Some(o) if o.lease.is_held() && lease.is_held() && o.lease.lock_id() == lease.lock_id());
        let state = LockState {
            class: None,
            first_seen_held: match &old {
                Some(o) if same_lock => o.state.first_seen_held,
                _ if lease.is_held() => Some(now),
                _ => None,
            },
            overdue_logged: same_lock && old.as_ref().is_some_and(|o| o.state.overdue_logged),
        };
        self.locks.insert(lock.clone(), Lock { lease, state });
        // A new lock (another ID, or held after a release) is judged on its
        // own evidence: the previous lock's verdict says nothing about it.
        let keep = if same_lock { old_class } else { None };
        self.reclassify_from(&lock, old_class, keep, now, &mut fx);
        fx
    }

    fn delete(&mut self, key: ObjectKey, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let Some(lock) = lock_key_of(&key) else {
            return fx;
        };
        if let Some(old) = self.locks.remove(&lock) {
            if old.lease.is_held() {
                let rec = self.change_record(&lock, &old, old.state.class, None, now);
                fx.class_changes.push(rec);
            }
            let (kind, name) = self.display_owner(&lock, &old.lease);
            self.gc_counter(&ObjectRef::new(&lock.namespace, kind, name));
        }
        fx
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, LockLease)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self.locks.lease_keys(scope.as_deref());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<PodState> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, pod: PodState, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        if self.pods.apply(key.clone(), pod) {
            // Reclassifying queues a live read where an own lock needs one.
            self.reclassify_holder(&key, now, &mut fx);
        }
        fx
    }

    fn delete(&mut self, key: ObjectKey, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        if self.pods.delete(&key) {
            self.reclassify_holder(&key, now, &mut fx);
        }
        fx
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, PodState)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self.pods.keys_in(scope.as_deref());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<TfObject> for Index {
    type Key = (Kind, ObjectKey);
    type Scope = (Kind, Option<String>);

    fn apply(&mut self, (kind, key): (Kind, ObjectKey), obj: TfObject, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        if obj.kind != kind {
            return IndexResource::<TfObject>::delete(self, (kind, key), now);
        }
        let lock = self.policy.apply_object(key, obj);
        // Own-pod recognition needs the object's full name: reclassify its lock.
        self.reclassify_lock(&lock, now, &mut fx);
        fx
    }

    fn delete(&mut self, (kind, key): (Kind, ObjectKey), now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let lock = self.policy.remove_object(kind, &key);
        self.gc_counter(&ObjectRef::new(&key.namespace, kind.as_str(), &key.name));
        self.reclassify_lock(&lock, now, &mut fx);
        fx
    }

    fn reset(
        &mut self,
        (kind, scope): &(Kind, Option<String>),
        items: Vec<((Kind, ObjectKey), TfObject)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self
            .policy
            .object_keys(*kind, scope.as_deref())
            .into_iter()
            .map(|k| (*kind, k))
            .collect();
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<CapiCluster> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, cluster: CapiCluster, _now: SystemTime) -> Effects {
        self.policy.apply_capi(key, cluster);
        Effects::default()
    }

    fn delete(&mut self, key: ObjectKey, _now: SystemTime) -> Effects {
        self.policy.remove_capi(&key);
        Effects::default()
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, CapiCluster)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self.policy.capi_keys(scope.as_deref());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<ForceUnlockEvent> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, ev: ForceUnlockEvent, _now: SystemTime) -> Effects {
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        self.force_unlocks.apply(key, ev, &known);
        Effects::default()
    }

    fn delete(&mut self, key: ObjectKey, _now: SystemTime) -> Effects {
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        self.force_unlocks.delete(&key, &known);
        Effects::default()
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, ForceUnlockEvent)>,
        _now: SystemTime,
    ) -> Effects {
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        self.force_unlocks.reset(scope.as_deref(), items, &known);
        Effects::default()
    }
}

/// The lock key of a lock Lease's name; None for a name that is not one.
fn lock_key_of(key: &ObjectKey) -> Option<LockKey> {
    let suffix = suffix_of_lock_lease(&key.name)?;
    Some(LockKey::new(&key.namespace, suffix))
}

/// A watched object, or a lock Lease, of that kind and name.
fn object_known(locks: &locks::LockIndex, policy: &policy::PolicyIndex, obj: &ObjectRef) -> bool {
    let Some(kind) = Kind::from_kind(&obj.kind) else {
        return false;
    };
    let key = LockKey::new(
        &obj.namespace,
        state_suffix(&obj.namespace, kind, &obj.name),
    );
    policy.object(&key).is_some() || locks.contains(&key)
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes `stale` keys that `items` does not list again, then applies
    /// `items`: the shared body of every non-Event reset.
    fn replace_all<T, K>(&mut self, stale: Vec<K>, items: Vec<(K, T)>, now: SystemTime) -> Effects
    where
        Self: IndexResource<T, Key = K>,
        K: Eq + std::hash::Hash + Clone,
    {
        let listed: HashSet<K> = items.iter().map(|(k, _)| k.clone()).collect();
        let mut fx = Effects::default();
        for key in stale.into_iter().filter(|k| !listed.contains(k)) {
            fx.extend(self.delete(key, now));
        }
        for (key, item) in items {
            fx.extend(self.apply(key, item, now));
        }
        fx
    }

    fn gc_counter(&mut self, obj: &ObjectRef) {
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        self.force_unlocks.gc(obj, &known);
    }
}

/// Classification: the joins between locks, objects and pods.
impl Index {
    fn reclassify_lock(&mut self, key: &LockKey, now: SystemTime, fx: &mut Effects) {
        if let Some(old) = self.locks.get(key).map(|l| l.state.class) {
            self.reclassify_from(key, old, old, now, fx);
        }
    }

    fn reclassify_holder(&mut self, pod: &ObjectKey, now: SystemTime, fx: &mut Effects) {
        for key in self.locks.held_by(pod) {
            self.reclassify_lock(&key, now, fx);
        }
    }

    /// The object a lock belongs to: the watched object, else kind and name
    /// from the Lease's owner labels when they are provably the real name.
    fn owner_of(&self, key: &LockKey) -> Option<(Kind, String)> {
        if let Some(obj) = self.policy.object(key) {
            return Some((obj.kind, obj.name.clone()));
        }
        verified_label_owner(key, &self.locks.get(key)?.lease)
    }

    /// Reclassifies a lock. `old_class` is what the log reports as "from";
    /// `keep` is the verdict to hold while a live read of the holder pod is
    /// pending (None for a new lock, which then starts as own_unverified).
    fn reclassify_from(
        &mut self,
        key: &LockKey,
        old_class: Option<HolderClass>,
        keep: Option<HolderClass>,
        now: SystemTime,
        fx: &mut Effects,
    ) {
        let owner = self.owner_of(key);
        let Some(lock) = self.locks.get(key) else {
            return;
        };
        let new_class = if lock.lease.is_held() {
            let holder = holder_of(
                lock.lease.info.as_ref(),
                owner.as_ref().map(|(k, n)| (*k, n.as_str())),
            );
            Some(match &holder {
                Holder::OwnPod(pod) => {
                    let pod_key = ObjectKey::new(&key.namespace, pod);
                    match self.pods.evidence(&pod_key) {
                        Some(ev) => classify(&holder, ev),
                        None => {
                            fx.confirm.push(pod_key);
                            // Unconfirmed: keep the last verdict of this
                            // same lock rather than flap through
                            // own_unverified for a few ms.
                            keep.unwrap_or(HolderClass::OwnUnverified)
                        }
                    }
                }
                other => classify(other, PodEvidence::Unreadable),
            })
        } else {
            None
        };
        if let Some(lock) = self.locks.get_mut(key) {
            lock.state.class = new_class;
        }
        if new_class != old_class {
            if let Some(lock) = self.locks.get(key) {
                let rec = self.change_record(key, lock, old_class, new_class, now);
                fx.class_changes.push(rec);
            }
        }
    }

    fn change_record(
        &self,
        key: &LockKey,
        lock: &Lock,
        from: Option<HolderClass>,
        to: Option<HolderClass>,
        now: SystemTime,
    ) -> ClassChange {
        let (kind, name) = self.display_owner(key, &lock.lease);
        ClassChange {
            namespace: key.namespace.clone(),
            kind,
            name,
            from,
            to,
            holder: lock.lease.holder_label().to_string(),
            age_seconds: lock.age(now).map(|(age, _)| age),
        }
    }

    /// Kind and name for metric labels, unique per lock so that no Lease
    /// can render series under another object's labels:
    /// - the watched object's kind and name;
    /// - else the `owner-kind`/`owner-name` labels, only when they reproduce
    ///   the Lease's suffix (see [`Self::owner_of`]);
    /// - else the kind from the labels or the suffix, and the suffix as the
    ///   name. Suffixes are unique per namespace, but an object may be
    ///   *named* like one (`x-m`): when that (kind, name) belongs to another
    ///   lock or object, the kind is left empty, which no object has.
    fn display_owner(&self, key: &LockKey, lease: &LockLease) -> (&'static str, String) {
        // `lease` may already be out of the map (a deletion being logged).
        if let Some(obj) = self.policy.object(key) {
            return (obj.kind.as_str(), obj.name.clone());
        }
        if let Some((kind, name)) = verified_label_owner(key, lease) {
            return (kind.as_str(), name);
        }
        let Some(kind) = lease.owner_kind() else {
            return ("", key.suffix.clone());
        };
        // Whose lock would (namespace, kind, suffix) name? Never this one:
        // a name whose suffix equals itself would need a sha256 preimage.
        let claimed = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, kind, &key.suffix),
        );
        let taken = self.owner_of(&claimed).is_some();
        (if taken { "" } else { kind.as_str() }, key.suffix.clone())
    }
}

/// Kind and name from a Lease's owner labels, only when they reproduce its
/// suffix. A long name is hashed in the label, and a copied label names
/// another object: neither is this lock's object.
fn verified_label_owner(key: &LockKey, lease: &LockLease) -> Option<(Kind, String)> {
    let kind = lease.owner_kind()?;
    let name = lease.label_name.as_deref()?;
    (state_suffix(&key.namespace, kind, name) == key.suffix).then(|| (kind, name.to_string()))
}

/// The verifier's questions.
impl Index {
    /// Records a live read of a holder pod and reclassifies its locks.
    pub fn record_pod_read(&mut self, pod: ObjectKey, read: PodRead, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        self.pods.record_read(pod.clone(), read);
        self.reclassify_holder(&pod, now, &mut fx);
        fx
    }

    /// Whether a queued live read of `pod` is still useful: some lock names
    /// it, the cache does not show it live, and no read has settled it as
    /// gone or finished (queued duplicates are dropped this way).
    pub fn needs_read(&self, pod: &ObjectKey) -> bool {
        self.locks.is_holder(pod) && self.pods.needs_read(pod)
    }

    /// Holder pods that need a (new) live read. Used by the periodic
    /// re-check.
    pub fn pods_to_recheck(&self) -> Vec<ObjectKey> {
        self.locks
            .holders()
            .filter(|pod| self.pods.needs_recheck(pod))
            .cloned()
            .collect()
    }

    /// Drops live-read results of pods no lock names any more.
    pub fn gc_pod_reads(&mut self) {
        let locks = &self.locks;
        self.pods.gc_reads(|pod| locks.is_holder(pod));
    }
}

/// What `/metrics`, the status page and the overdue check read.
impl Index {
    /// Effective timeouts of an object, resolved through its TerraformCluster.
    pub fn effective_for(&self, namespace: &str, obj: &TfObject) -> Effective {
        self.resolve_for(namespace, obj).effective
    }

    /// Effective timeouts of an object and where each came from.
    pub fn resolve_for(&self, namespace: &str, obj: &TfObject) -> Resolved {
        self.policy.resolve_for(namespace, obj)
    }

    /// The force-unlock counter of an object (zero when none was seen).
    pub fn force_unlocks_of(&self, namespace: &str, kind: &str, name: &str) -> ForceUnlocks {
        self.force_unlocks
            .of(&ObjectRef::new(namespace, kind, name))
    }

    /// Calls `f` for every force-unlock counter, known object or not.
    pub fn for_each_force_unlock(&self, mut f: impl FnMut(&str, &str, &str, ForceUnlocks)) {
        for (obj, c) in self.force_unlocks.counters() {
            f(&obj.namespace, &obj.kind, &obj.name, *c);
        }
    }

    /// Calls `f` for every lock Lease with its display kind and name.
    pub fn for_each_lock(&self, mut f: impl FnMut(LockView<'_>)) {
        for (key, lock) in self.locks.iter() {
            let (kind, name) = self.display_owner(key, &lock.lease);
            let effective = match self.policy.object(key) {
                Some(obj) => self.effective_for(&key.namespace, obj),
                None => effective(
                    lock.lease.owner_kind().unwrap_or(Kind::TerraformMachine),
                    None,
                    None,
                ),
            };
            f(LockView {
                namespace: &key.namespace,
                kind,
                name: &name,
                lease: &lock.lease,
                state: &lock.state,
                effective,
            });
        }
    }

    /// Calls `f` for every known object that has no lock Lease yet.
    pub fn for_each_unlocked_object(&self, mut f: impl FnMut(&str, &TfObject, Effective)) {
        for (key, obj) in self.policy.objects() {
            if !self.locks.contains(key) {
                f(&key.namespace, obj, self.effective_for(&key.namespace, obj));
            }
        }
    }

    /// Foreign or unknown locks that became older than their effective
    /// lockTimeoutSeconds since the last call; each lock ID is returned once.
    pub fn newly_overdue(&mut self, now: SystemTime) -> Vec<Overdue> {
        let mut found = Vec::new();
        self.for_each_lock(|v| {
            let (Some(class), Some((age, _))) = (v.state.class, v.age(now)) else {
                return;
            };
            if !v.state.overdue_logged && is_overdue(class, age, v.effective.lock_timeout_seconds) {
                found.push((
                    LockKey::new(v.namespace, &v.lease.suffix),
                    Overdue {
                        namespace: v.namespace.to_string(),
                        kind: v.kind,
                        name: v.name.to_string(),
                        class,
                        holder: v.lease.holder_label().to_string(),
                        operation: v
                            .lease
                            .info
                            .as_ref()
                            .map(|i| i.operation.clone())
                            .unwrap_or_default(),
                        age_seconds: age,
                        timeout_seconds: v.effective.lock_timeout_seconds,
                    },
                ));
            }
        });
        for (key, _) in &found {
            if let Some(l) = self.locks.get_mut(key) {
                l.state.overdue_logged = true;
            }
        }
        found.into_iter().map(|(_, o)| o).collect()
    }

    /// Number of held locks per class.
    pub fn held_per_class(&self) -> [(HolderClass, u64); 5] {
        let mut out = HolderClass::ALL.map(|c| (c, 0u64));
        for (_, lock) in self.locks.iter() {
            if let Some(class) = lock.state.class {
                if let Some(slot) = out.iter_mut().find(|(c, _)| *c == class) {
                    slot.1 += 1;
                }
            }
        }
        out
    }

    /// Number of lock Leases, objects and cached pods (for the status page).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.locks.len(), self.policy.len(), self.pods.len())
    }
}

/// A lock that just became overdue, for the warning log line.
#[derive(Clone, Debug, PartialEq)]
pub struct Overdue {
    /// Namespace.
    pub namespace: String,
    /// Kind of its object.
    pub kind: &'static str,
    /// Name of its object.
    pub name: String,
    /// foreign or unknown.
    pub class: HolderClass,
    /// Who, capped.
    pub holder: String,
    /// lock-info Operation.
    pub operation: String,
    /// Age in seconds.
    pub age_seconds: f64,
    /// Effective lockTimeoutSeconds.
    pub timeout_seconds: i64,
}

/// A lock Lease as `/metrics` renders it.
#[derive(Debug)]
pub struct LockView<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Full kind for the `kind` label ("" when not known at all).
    pub kind: &'static str,
    /// Object name for the `name` label.
    pub name: &'a str,
    /// The trimmed Lease.
    pub lease: &'a LockLease,
    /// What the index derived about it.
    pub state: &'a LockState,
    /// Effective timeouts of its object.
    pub effective: Effective,
}

impl LockView<'_> {
    /// Age at `now` and its source; None when not held.
    pub fn age(&self, now: SystemTime) -> Option<(f64, AgeSource)> {
        self.lease.age(now, self.state.first_seen_held)
    }
}

#[cfg(test)]
mod tests;
