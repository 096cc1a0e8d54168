//! The index's typed inputs: one [`IndexResource`] implementation per
//! watched type, each updating its sub-index and reclassifying the locks
//! the change touches.

use std::collections::HashSet;
use std::time::SystemTime;

use super::{
    force_unlocks, locks, policy, CapiCluster, Changes, Effects, ForceUnlockEvent, Index,
    IndexResource, Lock, LockKey, LockLease, LockState, ObjectKey, ObjectRef, PlanEntry, PodNode,
    PodState, TfObject,
};
use captf_core::kind::Kind;
use captf_core::suffix::{state_suffix, suffix_of_lock_lease};

impl IndexResource<LockLease> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, lease: LockLease, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let Some(lock) = lock_key_of(&key) else {
            return fx;
        };
        let old = self.locks.remove(&lock);
        if old.as_ref().is_none_or(|o| o.lease != lease) {
            self.mark(&lock);
        }
        self.set_claim(&lock, old.as_ref().map(|o| &o.lease), Some(&lease));
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
        if old.is_none() {
            self.force_unlocks.now_known(&lock);
        }
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
        self.deadlines.remove(&lock);
        if let Some(old) = self.locks.remove(&lock) {
            self.mark(&lock);
            self.set_claim(&lock, Some(&old.lease), None);
            if old.lease.is_held() {
                self.record_change(&mut fx, &lock, &old, old.state.class, None, now);
            }
            // By the lock, not by the name it was shown under: a Lease
            // that outlived its long-named object shows its suffix.
            let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
            self.force_unlocks.gc_lock(&lock, &known);
        }
        self.review_verdict(&lock, now);
        self.review_node_lost(&lock, now);
        fx
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, LockLease)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self.locks.lease_keys(scope.as_deref());
        self.locks.reserve_total(self.locks.len() + items.len());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<PodState> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, pod: PodState, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        if pod.node == PodNode::Invalid {
            fx.invalid_node_names += 1;
        }
        let same_signs = self.pods.cached_ref(&key).is_some_and(|old| *old == pod);
        self.nodes.place_pod(&key, pod.node.name(), now);
        if self.pods.apply(key.clone(), pod) {
            // Reclassifying queues a live read where an own lock needs one
            // (and reviews the lost-node evidence).
            self.reclassify_holder(&key, now, &mut fx);
        } else if !same_signs {
            self.review_node_lost_of_pod(&key, now);
        }
        fx
    }

    fn delete(&mut self, key: ObjectKey, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        self.nodes.unplace_pod(&key);
        if self.pods.delete(&key) {
            self.reclassify_holder(&key, now, &mut fx);
        } else {
            self.review_node_lost_of_pod(&key, now);
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
        let lock = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, kind, &key.name),
        );
        let old = self.policy.object(&lock);
        if old == Some(&obj) {
            // CAPTF writes its status often (lastRun, other conditions):
            // nothing the exporter keeps moved.
            return fx;
        }
        let new = old.is_none();
        // What its machines and pools inherit: its policies, and which of
        // them find it (its label). CAPTF's status churn (activeJob, its
        // conditions) moves neither and reaches its own key alone.
        let reaches_inheritors = kind == Kind::TerraformCluster
            && old.is_none_or(|o| o.cluster != obj.cluster || o.cluster_label != obj.cluster_label);
        let old_label = old.and_then(|o| o.cluster_label.clone());
        self.mark(&lock);
        let mut inheritors = Vec::new();
        if reaches_inheritors {
            inheritors = self.policy.inheritors_of_terraform_cluster(
                &key.namespace,
                &key.name,
                old_label.as_deref(),
            );
        }
        let name = key.name.clone();
        let lock = self.policy.apply_object(lock, key, obj);
        if new {
            self.force_unlocks.now_known(&lock);
        }
        if reaches_inheritors {
            let label = self
                .policy
                .object(&lock)
                .and_then(|o| o.cluster_label.clone());
            inheritors.extend(self.policy.inheritors_of_terraform_cluster(
                &lock.namespace,
                &name,
                label.as_deref(),
            ));
            self.inherited_policy_changed(inheritors, now);
        }
        // Own-pod recognition needs the object's full name: reclassify its
        // lock (which also compares CAPTF's verdict in the status with it).
        self.reclassify_lock_or_review(&lock, now, &mut fx);
        fx
    }

    fn delete(&mut self, (kind, key): (Kind, ObjectKey), now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let lock = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, kind, &key.name),
        );
        if self.policy.object(&lock).is_none() {
            return fx;
        }
        self.mark(&lock);
        let inheritors = match kind {
            Kind::TerraformCluster => {
                let label = self
                    .policy
                    .object(&lock)
                    .and_then(|o| o.cluster_label.clone());
                let ns = &key.namespace;
                self.policy
                    .inheritors_of_terraform_cluster(ns, &key.name, label.as_deref())
            }
            _ => Vec::new(),
        };
        let lock = self.policy.remove_object(kind, &key);
        self.inherited_policy_changed(inheritors, now);
        self.gc_counter(&ObjectRef::new(&key.namespace, kind.as_str(), &key.name));
        self.reclassify_lock_or_review(&lock, now, &mut fx);
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
        self.policy.reserve_objects(self.policy.len() + items.len());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<PlanEntry> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, plan: PlanEntry, _now: SystemTime) -> Effects {
        let before = self.plans.target_of(&key).cloned();
        if let Some(after) = self.plans.apply(key, plan) {
            self.mark(&after);
            if let Some(before) = before {
                self.mark(&before);
            }
        }
        Effects::default()
    }

    fn delete(&mut self, key: ObjectKey, _now: SystemTime) -> Effects {
        if let Some(target) = self.plans.remove(&key) {
            self.mark(&target);
        }
        Effects::default()
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, PlanEntry)>,
        now: SystemTime,
    ) -> Effects {
        let stale = self.plans.keys_in(scope.as_deref());
        self.replace_all(stale, items, now)
    }
}

impl IndexResource<CapiCluster> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, cluster: CapiCluster, now: SystemTime) -> Effects {
        let inheritors = self.policy.inheritors_of_label(&key.namespace, &key.name);
        if self.policy.apply_capi(key, cluster) {
            // Which TerraformCluster its machines and pools inherit from.
            self.inherited_policy_changed(inheritors, now);
        }
        Effects::default()
    }

    fn delete(&mut self, key: ObjectKey, now: SystemTime) -> Effects {
        let inheritors = self.policy.inheritors_of_label(&key.namespace, &key.name);
        if self.policy.remove_capi(&key) {
            self.inherited_policy_changed(inheritors, now);
        }
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

    fn apply(&mut self, key: ObjectKey, ev: ForceUnlockEvent, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        let before = self.force_unlocks.lock_of_event(&key);
        let after = force_unlocks::lock_of_regarding(&ev);
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        let stored =
            self.force_unlocks
                .apply(key, without_future_time(ev, now), self.starting, &known);
        let moved = match stored {
            None => [None, None],
            Some(force_unlocks::Stored::Kept) => [before, after],
            // What was kept of it before, if anything, is gone.
            Some(force_unlocks::Stored::Dropped) => {
                fx.events_dropped = 1;
                [before, None]
            }
        };
        for lock in moved.iter().flatten() {
            self.mark(lock);
        }
        fx
    }

    fn delete(&mut self, key: ObjectKey, _now: SystemTime) -> Effects {
        let before = self.force_unlocks.lock_of_event(&key);
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        if self.force_unlocks.delete(&key, &known) {
            if let Some(lock) = before {
                self.mark(&lock);
            }
        }
        Effects::default()
    }

    fn reset(
        &mut self,
        scope: &Option<String>,
        items: Vec<(ObjectKey, ForceUnlockEvent)>,
        now: SystemTime,
    ) -> Effects {
        let items = items
            .into_iter()
            .map(|(k, ev)| (k, without_future_time(ev, now)))
            .collect();
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        let events_dropped = self.force_unlocks.reset(scope.as_deref(), items, &known);
        // A relist of Events is rare; which counters it moved is not
        // worth tracking.
        self.changes.mark_all();
        Effects {
            events_dropped,
            ..Effects::default()
        }
    }
}

/// Most an Event's time may lie ahead of this exporter's clock. Event
/// times come from the writer's clock; one from the future would pin the
/// last force-unlock time (a maximum) until that future passes.
pub const MAX_EVENT_CLOCK_SKEW_SECONDS: f64 = 60.0;

/// The Event with its time dropped when that time lies further ahead of
/// `now` than [`MAX_EVENT_CLOCK_SKEW_SECONDS`]; it still counts.
fn without_future_time(mut ev: ForceUnlockEvent, now: SystemTime) -> ForceUnlockEvent {
    let limit = super::unix_seconds(now) + MAX_EVENT_CLOCK_SKEW_SECONDS;
    ev.last_seen = ev.last_seen.filter(|t| *t <= limit);
    ev
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

    /// What `/metrics` shows that changed since the last call: a write
    /// that changes nothing (a pod write that moves no lock's class, an
    /// object whose status moved only in fields the exporter does not
    /// keep, the delete of an Event that was never kept) marks nothing and
    /// leaves the rendered exposition current.
    pub fn take_changes(&mut self) -> Changes {
        self.changes.take()
    }

    /// Whether anything `/metrics` shows changed since the last call.
    #[cfg(test)]
    pub(crate) fn take_changed(&mut self) -> bool {
        !self.take_changes().is_empty()
    }

    /// The effective timeouts of `inheritors` (machines and pools) may have
    /// moved with their TerraformCluster or CAPI Cluster: their series are
    /// redrawn and their overdue deadlines computed again, theirs alone.
    fn inherited_policy_changed(&mut self, mut inheritors: Vec<LockKey>, now: SystemTime) {
        inheritors.sort_unstable();
        inheritors.dedup();
        for key in &inheritors {
            self.mark(key);
            self.schedule_overdue(key, now);
        }
    }

    /// Marks the series of one lock key out of date, and those of a lock
    /// whose shown name depends on this key.
    pub(super) fn mark(&mut self, key: &LockKey) {
        self.changes.mark(key);
        if let Some(claimant) = self.claims.get(key) {
            self.changes.mark(claimant);
        }
    }

    /// Keeps [`Index::claims`] current for the Lease of `key` going from
    /// `old` to `new`.
    fn set_claim(&mut self, key: &LockKey, old: Option<&LockLease>, new: Option<&LockLease>) {
        if let Some(claimed) = old.and_then(|l| super::classes::claimed_by(key, l)) {
            self.claims.remove(&claimed);
        }
        if let Some(claimed) = new.and_then(|l| super::classes::claimed_by(key, l)) {
            self.claims.insert(claimed, key.clone());
        }
    }

    /// Deletes `stale` keys that `items` does not list again, then applies
    /// `items`: the shared body of every non-Event reset.
    fn replace_all<T, K>(&mut self, stale: Vec<K>, items: Vec<(K, T)>, now: SystemTime) -> Effects
    where
        Self: IndexResource<T, Key = K>,
        K: Eq + std::hash::Hash + Clone,
    {
        let mut fx = Effects::default();
        // A sync this large redraws everything anyway (past
        // MAX_MARKED_KEYS the set gives up): saying so first spares a
        // hash-set insert per key under the lock (a first sync of 10k
        // Leases spent a tenth of its CPU there).
        if items.len() + stale.len() >= super::changes::MAX_MARKED_KEYS / 4 {
            self.changes.mark_all();
        }
        // A first list has nothing stale: no set of every listed key then.
        if !stale.is_empty() {
            let listed: HashSet<K> = items.iter().map(|(k, _)| k.clone()).collect();
            for key in stale.into_iter().filter(|k| !listed.contains(k)) {
                fx.extend(self.delete(key, now));
            }
        }
        for (key, item) in items {
            fx.extend(self.apply(key, item, now));
        }
        fx
    }

    /// A watched object, or a lock Lease, of that kind and name.
    pub(super) fn object_known(&self, obj: &ObjectRef) -> bool {
        object_known(&self.locks, &self.policy, obj)
    }

    fn gc_counter(&mut self, obj: &ObjectRef) {
        let known = |o: &ObjectRef| object_known(&self.locks, &self.policy, o);
        self.force_unlocks.gc(obj, &known);
    }
}
