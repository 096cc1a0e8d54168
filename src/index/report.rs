//! Read-only questions the on-call pages and commands ask: the facts about
//! held locks, from the index alone (no API call), for
//! [`crate::oncall::model::LockReport`].

use super::{Index, LockKey, LockLease, ObjectKey};
use crate::core::classify::{holder_of, Holder};
use crate::core::kind::Kind;
use crate::core::suffix::state_suffix;
use crate::core::timeouts::resolve;
use crate::oncall::model::{LockFacts, ObjectKnown, PodFacts};

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
            .iter()
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
                Some(self.facts_of(k))
            })
            .flatten()
            .collect()
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
            if let Some(f) = self.facts_of(&key) {
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

    fn facts_of(&self, key: &LockKey) -> Option<LockFacts> {
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
