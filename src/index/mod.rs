//! The in-memory index: trimmed copies of the watched objects, joined by key.
//!
//! Watchers feed it [`Change`]s; `/metrics` reads it. It does no I/O, so it is
//! tested with synthetic objects and no runtime. Every join is a hash lookup:
//! a lock Lease and its Terraform* object share the key (namespace, state
//! suffix), a holder pod is found by (namespace, pod name), a TerraformCluster
//! by (namespace, name) or by (namespace, cluster-name label).
//!
//! Holder classes are kept up to date on every change (not computed per
//! scrape), so a class transition is logged once, when it happens.

mod entries;
mod resource;

pub use entries::unix_seconds;
pub use entries::{
    AgeSource, CapiCluster, ForceUnlockEvent, ForceUnlocks, LockLease, PodState, TerraformCluster,
    TfObject,
};
pub use resource::Resource;

/// Now as Unix seconds.
pub fn unix_now() -> f64 {
    unix_seconds(SystemTime::now())
}

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use crate::core::classify::{classify, holder_of, is_overdue, Holder, HolderClass, PodEvidence};
use crate::core::kind::Kind;
use crate::core::suffix::state_suffix;
use crate::core::timeouts::{
    effective, resolve, terraform_cluster_name, CapiClusterLookup, ClusterPolicies, Effective,
    Resolved,
};

/// (namespace, name) of a namespaced object.
pub type NsName = (String, String);

/// A trimmed object as the index stores it, one variant per watched resource.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A state-lock Lease.
    Lease(LockLease),
    /// A TerraformCluster, TerraformMachine or TerraformMachinePool.
    Object(TfObject),
    /// A CAPI Cluster.
    Capi(CapiCluster),
    /// A runner pod.
    Pod(PodState),
    /// A ForceUnlocked Event from the CAPTF controller.
    ForceUnlock(ForceUnlockEvent),
}

/// One change from a watch, already trimmed. `entry: None` removes the key
/// (a deletion, or an object that no longer passes the filters).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Namespace and name of the API object.
    pub key: NsName,
    /// What the index keeps of it.
    pub entry: Option<Entry>,
}

/// What a live read of a holder pod found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRead {
    /// The pod exists and has not reached Succeeded or Failed.
    Live,
    /// The pod exists with phase Succeeded or Failed.
    Finished,
    /// The API server answered not found.
    Gone,
    /// The read failed for another reason (403, 500, transport).
    Failed,
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
    pub confirm: Vec<NsName>,
}

/// Key of a lock and of its object: (namespace, state suffix).
type LockKey = (String, String);

/// The index. Not thread-safe by itself; the runtime wraps it in a lock.
#[derive(Debug, Default)]
pub struct Index {
    locks: HashMap<LockKey, LockLease>,
    objects: HashMap<LockKey, TfObject>,
    clusters: HashMap<NsName, TerraformCluster>,
    /// TerraformCluster names per (namespace, cluster-name label).
    clusters_by_label: HashMap<NsName, Vec<String>>,
    capi: HashMap<NsName, CapiCluster>,
    pods: HashMap<NsName, PodState>,
    /// Live reads of holder pods the cache called not live.
    confirmed: HashMap<NsName, PodRead>,
    /// Locks per holder pod (namespace, host), for pod-driven reclassification.
    locks_by_holder: HashMap<NsName, HashSet<LockKey>>,
    /// Occurrences counted so far per ForceUnlocked Event (namespace, name).
    force_unlock_events: HashMap<NsName, ForceUnlockEvent>,
    /// Event watch scopes whose first list is done: Events listed before
    /// that are history, not new force-unlocks.
    events_baselined: HashSet<String>,
    /// Force-unlock counters per (namespace, regarding kind, regarding name).
    force_unlocks: HashMap<ObjectRef, ForceUnlocks>,
    /// How many stored Events name each object: a counter outlives its
    /// object only while an Event still names it.
    event_refs: HashMap<ObjectRef, usize>,
}

/// (namespace, kind, name) of an object an Event names.
type ObjectRef = (String, String, String);

/// Most force-unlocks one Event update may add to a counter. CAPTF emits
/// each ForceUnlocked Event once, without a series (every Job names a new
/// related object), so a real update adds 1; a series count that jumps
/// further is a bad or hostile Event and must not move the counter by
/// billions. Alerts fire on any increase, so capping the size of one
/// increase never hides a page. See docs/decisions/exporter.md.
pub const MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE: u64 = 10;

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one change of `resource` and returns what the caller must do.
    pub fn apply(&mut self, resource: Resource, change: Change, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        match resource {
            Resource::Leases => self.apply_lease(change, now, &mut fx),
            Resource::Pods => self.apply_pod(change, now, &mut fx),
            Resource::Clusters => self.apply_capi(change),
            Resource::TerraformClusters
            | Resource::TerraformMachines
            | Resource::TerraformMachinePools => self.apply_object(resource, change, now, &mut fx),
            Resource::Events => self.apply_event(change, true),
        }
        fx
    }

    /// Replaces every entry of `resource` in `namespace` (all namespaces when
    /// None) by `changes`: the end of a (re)list. Keys absent from the list
    /// were deleted while the watch was down.
    pub fn resync(
        &mut self,
        resource: Resource,
        namespace: Option<&str>,
        changes: Vec<Change>,
        now: SystemTime,
    ) -> Effects {
        let listed: HashSet<NsName> = changes
            .iter()
            .filter(|c| c.entry.is_some())
            .map(|c| c.key.clone())
            .collect();
        let in_scope = |ns: &str| namespace.is_none_or(|n| n == ns);
        let stale: Vec<NsName> = self
            .keys_of(resource)
            .into_iter()
            .filter(|k| in_scope(&k.0) && !listed.contains(k))
            .collect();
        if resource == Resource::Events {
            let scope = namespace.unwrap_or("").to_string();
            let counting = self.events_baselined.contains(&scope);
            for key in stale {
                self.remove_event(&key);
            }
            for change in changes {
                self.apply_event(change, counting);
            }
            self.events_baselined.insert(scope);
            return Effects::default();
        }
        let mut fx = Effects::default();
        for key in stale {
            let more = self.apply(resource, Change { key, entry: None }, now);
            fx.class_changes.extend(more.class_changes);
            fx.confirm.extend(more.confirm);
        }
        for change in changes {
            let more = self.apply(resource, change, now);
            fx.class_changes.extend(more.class_changes);
            fx.confirm.extend(more.confirm);
        }
        fx
    }

    /// Records a live read of a holder pod and reclassifies its locks.
    pub fn record_pod_read(&mut self, pod: NsName, read: PodRead, now: SystemTime) -> Effects {
        let mut fx = Effects::default();
        self.confirmed.insert(pod.clone(), read);
        self.reclassify_holder(&pod, now, &mut fx);
        fx
    }

    /// Whether a queued live read of `pod` is still useful: some lock names
    /// it, the cache does not show it live, and no read has settled it as
    /// gone or finished (queued duplicates are dropped this way).
    pub fn needs_read(&self, pod: &NsName) -> bool {
        self.locks_by_holder.contains_key(pod)
            && !self.pod_cached_live(pod)
            && !matches!(
                self.confirmed.get(pod),
                Some(PodRead::Gone) | Some(PodRead::Finished)
            )
    }

    /// Holder pods that need a (new) live read: the cache does not show them
    /// live and their last read failed or found them live (cache lag that has
    /// not resolved). Used by the periodic re-check.
    pub fn pods_to_recheck(&self) -> Vec<NsName> {
        self.locks_by_holder
            .keys()
            .filter(|pod| !self.pod_cached_live(pod))
            .filter(|pod| {
                matches!(
                    self.confirmed.get(*pod),
                    None | Some(PodRead::Failed) | Some(PodRead::Live)
                )
            })
            .cloned()
            .collect()
    }

    /// Drops live-read results of pods no lock names any more.
    pub fn gc_pod_reads(&mut self) {
        let holders = &self.locks_by_holder;
        self.confirmed.retain(|pod, _| holders.contains_key(pod));
    }

    fn keys_of(&self, resource: Resource) -> Vec<NsName> {
        match resource {
            Resource::Leases => self
                .locks
                .values()
                .map(|l| (l.namespace.clone(), l.lease_name()))
                .collect(),
            Resource::Pods => self.pods.keys().cloned().collect(),
            Resource::Clusters => self.capi.keys().cloned().collect(),
            Resource::TerraformClusters
            | Resource::TerraformMachines
            | Resource::TerraformMachinePools => {
                let kind = resource.kind();
                self.objects
                    .iter()
                    .filter(|(_, o)| Some(o.kind) == kind)
                    .map(|((ns, _), o)| (ns.clone(), o.name.clone()))
                    .collect()
            }
            Resource::Events => self.force_unlock_events.keys().cloned().collect(),
        }
    }

    /// Counts a ForceUnlocked Event: a new Event once per occurrence, a known
    /// one by the increase of its series count. With `counting` false (the
    /// first list) it only records the Event and its time.
    fn apply_event(&mut self, change: Change, counting: bool) {
        let Some(Entry::ForceUnlock(ev)) = change.entry else {
            self.remove_event(&change.key);
            return;
        };
        let previous = self.force_unlock_events.get(&change.key);
        let before = previous.map(|e| e.occurrences);
        let old_ref = previous.map(|e| (e.namespace.clone(), e.kind.clone(), e.name.clone()));
        let new_ref = (ev.namespace.clone(), ev.kind.clone(), ev.name.clone());
        if old_ref.as_ref() != Some(&new_ref) {
            *self.event_refs.entry(new_ref).or_default() += 1;
            if let Some(old) = old_ref {
                self.release_event_ref(old);
            }
        }
        let new = match before {
            Some(b) => ev.occurrences.saturating_sub(b),
            None if counting => ev.occurrences,
            None => 0,
        }
        .min(MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
        let key = (ev.namespace.clone(), ev.kind.clone(), ev.name.clone());
        let counter = self.force_unlocks.entry(key).or_default();
        counter.total = counter.total.saturating_add(new);
        if let Some(t) = ev.last_seen {
            counter.last_seen = Some(counter.last_seen.map_or(t, |c: f64| c.max(t)));
        }
        let occurrences = before.map_or(ev.occurrences, |b| b.max(ev.occurrences));
        self.force_unlock_events
            .insert(change.key, ForceUnlockEvent { occurrences, ..ev });
    }

    fn remove_event(&mut self, key: &NsName) {
        if let Some(old) = self.force_unlock_events.remove(key) {
            self.release_event_ref((old.namespace, old.kind, old.name));
        }
    }

    fn release_event_ref(&mut self, obj: ObjectRef) {
        if let Some(n) = self.event_refs.get_mut(&obj) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.event_refs.remove(&obj);
                self.gc_force_unlocks(&obj);
            }
        }
    }

    /// Drops the counter of an object that is gone and that no stored Event
    /// names any more, so deleted objects do not leave series behind.
    fn gc_force_unlocks(&mut self, obj: &ObjectRef) {
        if self.event_refs.contains_key(obj) || self.object_known(obj) {
            return;
        }
        self.force_unlocks.remove(obj);
    }

    /// A watched object, or a lock Lease, of that kind and name.
    fn object_known(&self, (ns, kind, name): &ObjectRef) -> bool {
        let Some(kind) = Kind::from_kind(kind) else {
            return false;
        };
        let key = (ns.clone(), state_suffix(ns, kind, name));
        self.objects.contains_key(&key) || self.locks.contains_key(&key)
    }

    /// The force-unlock counter of an object (zero when none was seen).
    pub fn force_unlocks_of(&self, namespace: &str, kind: &str, name: &str) -> ForceUnlocks {
        self.force_unlocks
            .get(&(namespace.to_string(), kind.to_string(), name.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// Calls `f` for every force-unlock counter, known object or not.
    pub fn for_each_force_unlock(&self, mut f: impl FnMut(&str, &str, &str, ForceUnlocks)) {
        for ((ns, kind, name), c) in &self.force_unlocks {
            f(ns, kind, name, *c);
        }
    }

    fn apply_lease(&mut self, change: Change, now: SystemTime, fx: &mut Effects) {
        let (namespace, lease_name) = change.key;
        let Some(suffix) = crate::core::suffix::suffix_of_lock_lease(&lease_name) else {
            return;
        };
        let key: LockKey = (namespace, suffix.to_string());
        let old = self.locks.remove(&key);
        let old_class = old.as_ref().and_then(|l| l.class);
        if let Some(old) = &old {
            self.unlink_holder(&key, old);
        }
        let Some(Entry::Lease(mut lease)) = change.entry else {
            if let Some(old) = old {
                if old.is_held() {
                    fx.class_changes
                        .push(self.change_record(&key, &old, old_class, None, now));
                }
                let (kind, name) = self.display_owner(&key, &old);
                self.gc_force_unlocks(&(key.0.clone(), kind.to_string(), name));
            }
            return;
        };
        // Keep the observed start of a lock across updates and relists of
        // the same lock, so an "observed" age does not restart.
        let same_lock = matches!(&old, Some(o) if o.is_held() && lease.is_held() && o.lock_id() == lease.lock_id());
        lease.first_seen_held = match &old {
            Some(o) if same_lock => o.first_seen_held,
            _ if lease.is_held() => Some(now),
            _ => None,
        };
        lease.overdue_logged = same_lock && old.as_ref().is_some_and(|o| o.overdue_logged);
        lease.class = None;
        self.locks.insert(key.clone(), lease);
        self.link_holder(&key);
        // A new lock (another ID, or held after a release) is judged on its
        // own evidence: the previous lock's verdict says nothing about it.
        let keep = if same_lock { old_class } else { None };
        self.reclassify_from(&key, old_class, keep, now, fx);
    }

    fn apply_object(
        &mut self,
        resource: Resource,
        change: Change,
        now: SystemTime,
        fx: &mut Effects,
    ) {
        let Some(kind) = resource.kind() else { return };
        let (namespace, name) = change.key;
        // The suffix is a function of (namespace, kind, name): an update or
        // deletion lands on the same key.
        let suffix = state_suffix(&namespace, kind, &name);
        self.objects.remove(&(namespace.clone(), suffix.clone()));
        if kind == Kind::TerraformCluster {
            if let Some(old) = self.clusters.remove(&(namespace.clone(), name.clone())) {
                self.unindex_cluster_label(&namespace, &name, old.cluster_label.as_deref());
            }
        }
        let deleted = !matches!(change.entry, Some(Entry::Object(_)));
        if let Some(Entry::Object(obj)) = change.entry {
            if let Some(tc) = obj.cluster {
                if let Some(label) = obj.cluster_label.clone() {
                    self.clusters_by_label
                        .entry((namespace.clone(), label))
                        .or_default()
                        .push(name.clone());
                }
                self.clusters.insert(
                    (namespace.clone(), name.clone()),
                    TerraformCluster {
                        cluster_label: obj.cluster_label.clone(),
                        policies: tc,
                    },
                );
            }
            self.objects
                .insert((namespace.clone(), suffix.clone()), obj);
        }
        if deleted {
            self.gc_force_unlocks(&(namespace.clone(), kind.as_str().to_string(), name));
        }
        // Own-pod recognition needs the object's full name: reclassify its lock.
        let key = (namespace, suffix);
        if self.locks.contains_key(&key) {
            let old_class = self.locks.get(&key).and_then(|l| l.class);
            self.reclassify(&key, old_class, now, fx);
        }
    }

    fn unindex_cluster_label(&mut self, namespace: &str, name: &str, label: Option<&str>) {
        let Some(label) = label else { return };
        let k = (namespace.to_string(), label.to_string());
        if let Some(names) = self.clusters_by_label.get_mut(&k) {
            names.retain(|n| n != name);
            if names.is_empty() {
                self.clusters_by_label.remove(&k);
            }
        }
    }

    fn apply_capi(&mut self, change: Change) {
        match change.entry {
            Some(Entry::Capi(c)) => {
                self.capi.insert(change.key, c);
            }
            _ => {
                self.capi.remove(&change.key);
            }
        }
    }

    fn apply_pod(&mut self, change: Change, now: SystemTime, fx: &mut Effects) {
        let key = change.key;
        let before = self.pod_cached_live(&key);
        match change.entry {
            Some(Entry::Pod(p)) => {
                self.pods.insert(key.clone(), p);
            }
            _ => {
                self.pods.remove(&key);
            }
        }
        let after = self.pod_cached_live(&key);
        if before == after && self.confirmed.contains_key(&key) {
            return;
        }
        // The cache moved: an earlier live read no longer describes the pod.
        self.confirmed.remove(&key);
        // Reclassifying queues a live read where an own lock needs one.
        self.reclassify_holder(&key, now, fx);
    }

    fn pod_cached_live(&self, pod: &NsName) -> bool {
        self.pods.get(pod).is_some_and(|p| !p.finished)
    }

    fn link_holder(&mut self, key: &LockKey) {
        if let Some(pod) = self.locks.get(key).and_then(|l| l.holder_pod_key()) {
            self.locks_by_holder
                .entry(pod)
                .or_default()
                .insert(key.clone());
        }
    }

    fn unlink_holder(&mut self, key: &LockKey, lease: &LockLease) {
        if let Some(pod) = lease.holder_pod_key() {
            if let Some(set) = self.locks_by_holder.get_mut(&pod) {
                set.remove(key);
                if set.is_empty() {
                    self.locks_by_holder.remove(&pod);
                }
            }
        }
    }

    fn reclassify_holder(&mut self, pod: &NsName, now: SystemTime, fx: &mut Effects) {
        let keys: Vec<LockKey> = self
            .locks_by_holder
            .get(pod)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            let old = self.locks.get(&key).and_then(|l| l.class);
            self.reclassify(&key, old, now, fx);
        }
    }

    /// The object a lock belongs to: the watched object, else kind and name
    /// from the Lease's owner labels when they are provably the real name.
    fn owner_of(&self, key: &LockKey) -> Option<(Kind, String)> {
        if let Some(obj) = self.objects.get(key) {
            return Some((obj.kind, obj.name.clone()));
        }
        verified_label_owner(key, self.locks.get(key)?)
    }

    /// Reclassifies a lock whose lock ID did not change: while a live read
    /// is pending it keeps its last class.
    fn reclassify(
        &mut self,
        key: &LockKey,
        old_class: Option<HolderClass>,
        now: SystemTime,
        fx: &mut Effects,
    ) {
        self.reclassify_from(key, old_class, old_class, now, fx);
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
        let Some(lease) = self.locks.get(key) else {
            return;
        };
        let new_class = if lease.is_held() {
            let holder = holder_of(
                lease.info.as_ref(),
                owner.as_ref().map(|(k, n)| (*k, n.as_str())),
            );
            Some(match &holder {
                Holder::OwnPod(pod) => {
                    let pod_key = (key.0.clone(), pod.clone());
                    match self.pod_evidence(&pod_key) {
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
        if let Some(lease) = self.locks.get_mut(key) {
            lease.class = new_class;
        }
        if new_class != old_class {
            if let Some(lease) = self.locks.get(key) {
                let rec = self.change_record(key, lease, old_class, new_class, now);
                fx.class_changes.push(rec);
            }
        }
    }

    /// What is known of a holder pod; None while a live read is pending.
    fn pod_evidence(&self, pod: &NsName) -> Option<PodEvidence> {
        if self.pod_cached_live(pod) {
            return Some(PodEvidence::Live);
        }
        match self.confirmed.get(pod)? {
            PodRead::Live => Some(PodEvidence::Live),
            PodRead::Finished => Some(PodEvidence::Finished),
            PodRead::Gone => Some(PodEvidence::Gone),
            PodRead::Failed => Some(PodEvidence::Unreadable),
        }
    }

    fn change_record(
        &self,
        key: &LockKey,
        lease: &LockLease,
        from: Option<HolderClass>,
        to: Option<HolderClass>,
        now: SystemTime,
    ) -> ClassChange {
        let (kind, name) = self.display_owner(key, lease);
        ClassChange {
            namespace: key.0.clone(),
            kind,
            name,
            from,
            to,
            holder: lease.holder_label().to_string(),
            age_seconds: lease.age(now).map(|(age, _)| age),
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
        if let Some(obj) = self.objects.get(key) {
            return (obj.kind.as_str(), obj.name.clone());
        }
        if let Some((kind, name)) = verified_label_owner(key, lease) {
            return (kind.as_str(), name);
        }
        let Some(kind) = lease.owner_kind() else {
            return ("", key.1.clone());
        };
        // Whose lock would (namespace, kind, suffix) name? Never this one:
        // a name whose suffix equals itself would need a sha256 preimage.
        let claimed = (key.0.clone(), state_suffix(&key.0, kind, &key.1));
        let taken = self.owner_of(&claimed).is_some();
        (if taken { "" } else { kind.as_str() }, key.1.clone())
    }

    /// Effective timeouts of an object, resolved through its TerraformCluster.
    pub fn effective_for(&self, namespace: &str, obj: &TfObject) -> Effective {
        self.resolve_for(namespace, obj).effective
    }

    /// Effective timeouts of an object and where each came from. Resolved
    /// on every call from the current TerraformCluster, CAPI Cluster and
    /// object, so a change to any of them shows at once.
    pub fn resolve_for(&self, namespace: &str, obj: &TfObject) -> Resolved {
        let cluster = if obj.kind == Kind::TerraformCluster {
            None
        } else {
            self.cluster_policies_for(namespace, obj.cluster_label.as_deref())
        };
        resolve(obj.kind, obj.jobs.as_ref(), cluster)
    }

    fn cluster_policies_for(
        &self,
        namespace: &str,
        label: Option<&str>,
    ) -> Option<&ClusterPolicies> {
        let label_key = label.map(|l| (namespace.to_string(), l.to_string()));
        let capi = match label_key.as_ref().and_then(|k| self.capi.get(k)) {
            Some(c) => CapiClusterLookup::Found(&c.infra_ref),
            None => CapiClusterLookup::NotFound,
        };
        let candidates: Vec<&str> = label_key
            .as_ref()
            .and_then(|k| self.clusters_by_label.get(k))
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let tc_name = terraform_cluster_name(label, capi, &candidates)?;
        self.clusters
            .get(&(namespace.to_string(), tc_name.to_string()))
            .map(|tc| &tc.policies)
    }

    /// Calls `f` for every lock Lease with its display kind and name.
    pub fn for_each_lock(&self, mut f: impl FnMut(LockView<'_>)) {
        for (key, lease) in &self.locks {
            let (kind, name) = self.display_owner(key, lease);
            let effective = match self.objects.get(key) {
                Some(obj) => self.effective_for(&key.0, obj),
                None => effective(
                    lease.owner_kind().unwrap_or(Kind::TerraformMachine),
                    None,
                    None,
                ),
            };
            f(LockView {
                namespace: &key.0,
                kind,
                name: &name,
                lease,
                effective,
            });
        }
    }

    /// Calls `f` for every known object that has no lock Lease yet.
    pub fn for_each_unlocked_object(&self, mut f: impl FnMut(&str, &TfObject, Effective)) {
        for (key, obj) in &self.objects {
            if !self.locks.contains_key(key) {
                f(&key.0, obj, self.effective_for(&key.0, obj));
            }
        }
    }

    /// Foreign or unknown locks that became older than their effective
    /// lockTimeoutSeconds since the last call; each lock ID is returned once.
    pub fn newly_overdue(&mut self, now: SystemTime) -> Vec<Overdue> {
        let mut found = Vec::new();
        self.for_each_lock(|v| {
            let (Some(class), Some((age, _))) = (v.lease.class, v.lease.age(now)) else {
                return;
            };
            if !v.lease.overdue_logged && is_overdue(class, age, v.effective.lock_timeout_seconds) {
                found.push((
                    (v.namespace.to_string(), v.lease.suffix.clone()),
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
                l.overdue_logged = true;
            }
        }
        found.into_iter().map(|(_, o)| o).collect()
    }

    /// Number of held locks per class.
    pub fn held_per_class(&self) -> [(HolderClass, u64); 5] {
        let mut out = HolderClass::ALL.map(|c| (c, 0u64));
        for lease in self.locks.values() {
            if let Some(class) = lease.class {
                if let Some(slot) = out.iter_mut().find(|(c, _)| *c == class) {
                    slot.1 += 1;
                }
            }
        }
        out
    }

    /// Number of lock Leases, objects and cached pods (for the status page).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.locks.len(), self.objects.len(), self.pods.len())
    }
}

/// Kind and name from a Lease's owner labels, only when they reproduce its
/// suffix. A long name is hashed in the label, and a copied label names
/// another object: neither is this lock's object.
fn verified_label_owner(key: &LockKey, lease: &LockLease) -> Option<(Kind, String)> {
    let kind = lease.owner_kind()?;
    let name = lease.label_name.as_deref()?;
    (state_suffix(&key.0, kind, name) == key.1).then(|| (kind, name.to_string()))
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
    /// Effective timeouts of its object.
    pub effective: Effective,
}

#[cfg(test)]
mod tests;
