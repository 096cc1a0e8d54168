//! TerraformPlans, joined to the object each is for: which objects' apply
//! waits for an approval (and so can start no Job to clear a stale lock).

use std::collections::{BTreeSet, HashMap};

use super::entries::PlanEntry;
use super::keys::{LockKey, ObjectKey};
use captf_core::suffix::state_suffix;

/// Most pending plans shown per object. CAPTF keeps at most one live plan
/// per target; the cap only bounds what a writer of TerraformPlans could
/// add to the exposition.
pub const MAX_PENDING_PLANS_SHOWN: usize = 3;

/// Plans by name, and the pending ones by target.
#[derive(Debug, Default)]
pub struct PlanIndex {
    plans: HashMap<ObjectKey, (LockKey, bool)>,
    pending: HashMap<LockKey, BTreeSet<String>>,
}

impl PlanIndex {
    /// Adds or replaces a plan; returns its target when the pending plans
    /// of an object changed (the previous target's too, when it had one:
    /// see [`PlanIndex::target_of`]).
    pub fn apply(&mut self, key: ObjectKey, plan: PlanEntry) -> Option<LockKey> {
        let target = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, plan.target_kind, &plan.target_name),
        );
        let kept = (target.clone(), plan.pending);
        if self.plans.get(&key) == Some(&kept) {
            return None;
        }
        let was_pending = self.remove(&key).is_some();
        if plan.pending {
            self.pending
                .entry(target.clone())
                .or_default()
                .insert(key.name.clone());
        }
        self.plans.insert(key, kept);
        (was_pending || plan.pending).then_some(target)
    }

    /// The object a plan is for.
    pub fn target_of(&self, key: &ObjectKey) -> Option<&LockKey> {
        self.plans.get(key).map(|(target, _)| target)
    }

    /// Forgets a plan; returns its target when it was pending.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<LockKey> {
        let (target, pending) = self.plans.remove(key)?;
        if !pending {
            return None;
        }
        if let Some(names) = self.pending.get_mut(&target) {
            names.remove(&key.name);
            if names.is_empty() {
                self.pending.remove(&target);
            }
        }
        Some(target)
    }

    /// Plan keys in a namespace (None: all).
    pub fn keys_in(&self, namespace: Option<&str>) -> Vec<ObjectKey> {
        self.plans
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.namespace == ns))
            .cloned()
            .collect()
    }

    /// Names of the pending plans of the object with this lock key, in
    /// name order, at most [`MAX_PENDING_PLANS_SHOWN`].
    pub fn pending_for(&self, target: &LockKey) -> impl Iterator<Item = &str> {
        self.pending
            .get(target)
            .into_iter()
            .flatten()
            .take(MAX_PENDING_PLANS_SHOWN)
            .map(String::as_str)
    }

    /// Whether no plan is kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_core::kind::Kind;

    fn plan(target: &str, pending: bool) -> PlanEntry {
        PlanEntry {
            target_kind: Kind::TerraformCluster,
            target_name: target.into(),
            pending,
        }
    }

    #[test]
    fn a_plan_is_pending_for_its_target_until_its_phase_moves_on() {
        let mut ix = PlanIndex::default();
        let key = ObjectKey::new("ns", "web-plan-1");
        let target = LockKey::new("ns", state_suffix("ns", Kind::TerraformCluster, "web"));
        assert_eq!(
            ix.apply(key.clone(), plan("web", true)),
            Some(target.clone())
        );
        assert!(
            ix.apply(key.clone(), plan("web", true)).is_none(),
            "the same again changes nothing"
        );
        assert_eq!(ix.pending_for(&target).collect::<Vec<_>>(), ["web-plan-1"]);
        // Approved: no longer waits.
        assert_eq!(
            ix.apply(key.clone(), plan("web", false)),
            Some(target.clone())
        );
        assert_eq!(ix.pending_for(&target).count(), 0);
        assert!(ix.remove(&key).is_none(), "not pending: nothing to redraw");
        assert!(ix.is_empty());
    }

    #[test]
    fn plans_of_another_namespace_or_kind_are_not_this_objects() {
        let mut ix = PlanIndex::default();
        ix.apply(ObjectKey::new("other", "p"), plan("web", true));
        let mut pool = plan("web", true);
        pool.target_kind = Kind::TerraformMachinePool;
        ix.apply(ObjectKey::new("ns", "q"), pool);
        let cluster = LockKey::new("ns", state_suffix("ns", Kind::TerraformCluster, "web"));
        assert_eq!(ix.pending_for(&cluster).count(), 0);
    }

    #[test]
    fn the_pending_plans_shown_are_capped() {
        let mut ix = PlanIndex::default();
        for i in 0..10 {
            ix.apply(ObjectKey::new("ns", format!("p{i}")), plan("web", true));
        }
        let target = LockKey::new("ns", state_suffix("ns", Kind::TerraformCluster, "web"));
        assert_eq!(
            ix.pending_for(&target).collect::<Vec<_>>(),
            ["p0", "p1", "p2"]
        );
        assert_eq!(ix.keys_in(Some("ns")).len(), 10);
        assert!(ix.keys_in(Some("other")).is_empty());
    }
}
