//! The read model of a held lock: [`LockFacts`] (with [`ObjectKnown`],
//! [`PodFacts`] and [`CaptfView`]), built by the index alone (no API call)
//! through [`Index::facts`] and read by the on-call pages and commands
//! (the on-call report is built from it).

use std::time::SystemTime;

use serde::Serialize;

use super::{
    AgeSource, CaptfStatus, Disagreement, ForceUnlocks, Index, LockKey, LockLease, NodeLost,
    NodeView, ObjectKey, PodRead, PodState,
};
use captf_core::classify::{holder_of, is_overdue, Holder, HolderClass};
use captf_core::kind::Kind;
use captf_core::suffix::state_suffix;
use captf_core::timeouts::{resolve, Resolved};

/// How the lock's object is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKnown {
    /// A watched (listed) Terraform* object.
    Watched,
    /// Not listed, but the Lease's owner labels reproduce its suffix.
    ProvenByLabels,
    /// Not known: kind from the labels or the suffix, name is the suffix.
    Unknown,
}

/// What the index (or a one-shot list) knows about the holder pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts {
    /// The pod name (the host after the last `@`).
    pub name: String,
    /// The watch cache's copy, if any.
    pub cached: Option<PodState>,
    /// The last live read and when it was made.
    pub last_read: Option<(PodRead, Option<SystemTime>)>,
}

/// What the index knows of the node the holder pod is bound to.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFacts {
    /// The pod's `spec.nodeName`.
    pub name: String,
    /// The Node watch has synced: `node` None then means no such Node.
    /// False in a namespaced install (no Node watch) or before the sync.
    pub watched: bool,
    /// The Node as kept, when it exists.
    pub node: Option<NodeView>,
    /// The lost-node evidence, when it holds.
    pub lost: Option<NodeLost>,
}

/// What CAPTF says of one object, beside the exporter's verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptfView {
    /// The object's CAPTF status; None when the object is not known.
    pub status: Option<CaptfStatus>,
    /// The disagreement under way, if any.
    pub disagreement: Option<Disagreement>,
    /// Pending TerraformPlans of the object.
    pub pending_plans: Vec<String>,
}

/// Everything known about one held lock: the input of the on-call report.
#[derive(Clone, Debug, PartialEq)]
pub struct LockFacts {
    /// Namespace.
    pub namespace: String,
    /// The object's kind when known (from the object, labels or suffix).
    pub kind: Option<Kind>,
    /// The kind shown (the `kind` label; "" when ambiguous).
    pub kind_label: &'static str,
    /// The object name shown (the `name` label).
    pub name: String,
    /// How the object is known.
    pub object: ObjectKnown,
    /// The trimmed Lease.
    pub lease: LockLease,
    /// The index's class verdict.
    pub class: HolderClass,
    /// When the lock was first seen held (age without `Created`).
    pub first_seen_held: Option<SystemTime>,
    /// Effective timeouts and their sources.
    pub resolved: Resolved,
    /// The holder pod, for holders recognised as own runner pods.
    pub pod: Option<PodFacts>,
    /// The holder pod's node, when the cache shows the pod bound to one.
    pub node: Option<NodeFacts>,
    /// Force-unlock counter of the object.
    pub force_unlocks: ForceUnlocks,
    /// ForceUnlocked Events present in the cluster (one-shot commands).
    pub force_unlock_events_present: Option<u64>,
    /// What CAPTF's status says of the object.
    pub captf: CaptfView,
    /// Read once by a one-shot command (`locks`, `explain`), not kept up to
    /// date by a watch: nothing was observed over time, so an age that
    /// would come from observation is unknown, and a pod listed finished
    /// was just read (not a cached copy).
    pub one_shot: bool,
    /// The exporter has not listed every kind a timeout comes from yet
    /// (`Index::begin_start`): whether the lock is overdue is not judged.
    pub starting: bool,
}

/// A lock's age at some moment, as [`LockFacts::age`] gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgeAt {
    /// Seconds (0 when not known).
    pub seconds: f64,
    /// Where the age comes from.
    pub source: AgeSource,
    /// False when a one-shot command would have to observe the age (no
    /// usable `Created`): it observed nothing, so the age is unknown.
    pub known: bool,
}

impl LockFacts {
    /// The lock's age at `now`.
    pub fn age(&self, now: SystemTime) -> AgeAt {
        let (seconds, source) = self
            .lease
            .age(now, self.first_seen_held, Some(self.class))
            .unwrap_or((0.0, AgeSource::Observed));
        let known = !(self.one_shot && source == AgeSource::Observed);
        AgeAt {
            seconds: if known { seconds } else { 0.0 },
            source,
            known,
        }
    }

    /// Whether the lock is overdue at `now`: foreign or unknown and older
    /// than its effective lockTimeoutSeconds; never while the timeouts are
    /// pending (`starting`) or the age is unknown.
    pub fn overdue(&self, now: SystemTime) -> bool {
        let age = self.age(now);
        age.known
            && !self.starting
            && is_overdue(
                self.class,
                age.seconds,
                self.resolved.effective.lock_timeout_seconds,
            )
    }

    /// The object's disagreement with CAPTF outlasted the grace
    /// (`verdict_mismatch` is 1).
    pub fn mismatch(&self) -> bool {
        self.captf.disagreement.as_ref().is_some_and(|d| d.flagged)
    }
}

/// Which held locks to return.
#[derive(Clone, Debug, Default)]
pub struct LockFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this class (its label value).
    pub class: Option<String>,
}

impl Index {
    /// Facts about every held lock that passes `filter`, in no order.
    pub fn held_lock_facts(&self, filter: &LockFilter) -> Vec<LockFacts> {
        self.locks
            .held()
            .filter(|(k, _)| {
                filter
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns == k.namespace)
            })
            .filter_map(|(k, lock)| {
                let class = lock.state.class?;
                if filter.class.as_deref().is_some_and(|c| c != class.as_str()) {
                    return None;
                }
                Some(self.facts(k))
            })
            .flatten()
            .collect()
    }

    /// The keys of every held lock that passes `filter`, in no order, and
    /// the count of every held lock per class (filter or not), in one walk
    /// of the held locks: the cheap part of [`Index::held_lock_facts`], for
    /// a caller that builds the facts a few keys at a time
    /// ([`Index::facts`]) so that no single read holds writers back for
    /// all of them.
    pub fn held_lock_keys(&self, filter: &LockFilter) -> (Vec<LockKey>, [(HolderClass, u64); 5]) {
        let mut per_class = HolderClass::ALL.map(|c| (c, 0u64));
        let mut keys = Vec::new();
        for (k, lock) in self.locks.held() {
            let Some(class) = lock.state.class else {
                continue;
            };
            if let Some(slot) = per_class.iter_mut().find(|(c, _)| *c == class) {
                slot.1 += 1;
            }
            let passes = filter.class.as_deref().is_none_or(|c| c == class.as_str())
                && filter
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns == k.namespace);
            if passes {
                keys.push(k.clone());
            }
        }
        (keys, per_class)
    }

    /// Facts about the held lock shown as (namespace, kind, name); `kind`
    /// is the full Kind ("" for an ambiguous one). None when no such lock
    /// is held.
    pub fn lock_facts(&self, namespace: &str, kind: &str, name: &str) -> Option<LockFacts> {
        // The object's own key first (one hash lookup), then a lock whose
        // display name is the suffix itself.
        let direct = Kind::from_kind(kind)
            .map(|k| LockKey::new(namespace, state_suffix(namespace, k, name)))
            .into_iter()
            .chain(std::iter::once(LockKey::new(namespace, name)));
        for key in direct {
            if let Some(f) = self.facts(&key) {
                if f.kind_label == kind && f.name == name {
                    return Some(f);
                }
            }
        }
        None
    }

    /// The `cluster.x-k8s.io/cluster-name` label of a known object; None
    /// when the object is not known.
    pub fn object_cluster_label(
        &self,
        namespace: &str,
        kind: Kind,
        name: &str,
    ) -> Option<Option<String>> {
        let key = LockKey::new(namespace, state_suffix(namespace, kind, name));
        self.policy
            .object(&key)
            .filter(|o| o.kind == kind && o.name == name)
            .map(|o| o.cluster_label.clone())
    }

    /// CAPTF's status of the object of a lock key, the disagreement under
    /// way, and its pending plans (for `explain` and the lock page).
    pub fn captf_view(&self, key: &LockKey) -> CaptfView {
        CaptfView {
            status: self.policy.object(key).map(|o| o.captf.clone()),
            disagreement: self.disagreements.get(key).cloned(),
            pending_plans: self.plans.pending_for(key).map(str::to_string).collect(),
        }
    }

    /// The facts about the lock of `key`; None when no lock is held there.
    pub fn facts(&self, key: &LockKey) -> Option<LockFacts> {
        let lock = self.locks.get(key)?;
        let class = lock.state.class?;
        let lease = &lock.lease;
        let (kind_label, name) = self.display_owner(key, lease);
        let (object, owner) = match self.policy.object(key) {
            Some(obj) => (ObjectKnown::Watched, Some((obj.kind, obj.name.clone()))),
            None => match label_owner(key, lease) {
                Some(o) => (ObjectKnown::ProvenByLabels, Some(o)),
                None => (ObjectKnown::Unknown, None),
            },
        };
        let kind = owner.as_ref().map(|(k, _)| *k).or(lease.owner_kind());
        let resolved = match self.policy.object(key) {
            Some(obj) => self.resolve_for(&key.namespace, obj),
            None => resolve(kind.unwrap_or(Kind::TerraformMachine), None, None),
        };
        let holder = holder_of(
            lease.info.as_ref(),
            owner.as_ref().map(|(k, n)| (*k, n.as_str())),
        );
        let pod = match holder {
            Holder::OwnPod(p) => {
                let pk = ObjectKey::new(&key.namespace, &p);
                Some(PodFacts {
                    cached: self.pods.cached(&pk),
                    last_read: self.pods.last_read(&pk),
                    name: p,
                })
            }
            _ => None,
        };
        let node = pod
            .as_ref()
            .and_then(|p| p.cached.as_ref()?.node.name().map(str::to_string))
            .map(|name| NodeFacts {
                watched: self.nodes.synced(),
                node: self.nodes.view(&name),
                lost: self.lost.get(key).cloned(),
                name,
            });
        Some(LockFacts {
            namespace: key.namespace.clone(),
            kind,
            kind_label,
            force_unlocks: self.force_unlocks_of(&key.namespace, kind_label, &name),
            name,
            object,
            lease: lease.clone(),
            class,
            first_seen_held: lock.state.first_seen_held,
            resolved,
            pod,
            node,
            force_unlock_events_present: None,
            captf: self.captf_view(key),
            one_shot: false,
            starting: self.starting,
        })
    }
}

/// Kind and name from the owner labels, only when they reproduce the suffix.
fn label_owner(key: &LockKey, lease: &LockLease) -> Option<(Kind, String)> {
    let kind = lease.owner_kind()?;
    let name = lease.label_name.as_deref()?;
    (state_suffix(&key.namespace, kind, name) == key.suffix).then(|| (kind, name.to_string()))
}
