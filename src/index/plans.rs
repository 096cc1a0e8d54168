//! TerraformPlans, joined to the object each is for: which objects' apply
//! waits for an approval (and so can start no Job to clear a stale lock).

use std::collections::{BTreeSet, HashMap};

use super::entries::PlanEntry;
use super::keys::{LockKey, ObjectKey};
use crate::core::suffix::state_suffix;

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
    /// Adds or replaces a plan; returns whether the pending plans of any
    /// object changed.
    pub fn apply(&mut self, key: ObjectKey, plan: PlanEntry) -> bool {
        let target = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, plan.target_kind, &plan.target_name),
        );
        let kept = (target.clone(), plan.pending);
        if self.plans.get(&key) == Some(&kept) {
            return false;
        }
        let was_pending = self.remove(&key);
        if plan.pending {
            self.pending
                .entry(target)
                .or_default()
                .insert(key.name.clone());
        }
        self.plans.insert(key, kept);
        was_pending || plan.pending
    }

    /// Forgets a plan; returns whether it was pending.
    pub fn remove(&mut self, key: &ObjectKey) -> bool {
        let Some((target, pending)) = self.plans.remove(key) else {
            return false;
        };
        if !pending {
            return false;
        }
        if let Some(names) = self.pending.get_mut(&target) {
            names.remove(&key.name);
            if names.is_empty() {
                self.pending.remove(&target);
            }
        }
        true
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
    use crate::core::kind::Kind;

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
        assert!(ix.apply(key.clone(), plan("web", true)));
        assert!(
            !ix.apply(key.clone(), plan("web", true)),
            "the same again changes nothing"
        );
        assert_eq!(ix.pending_for(&target).collect::<Vec<_>>(), ["web-plan-1"]);
        // Approved: no longer waits.
        assert!(ix.apply(key.clone(), plan("web", false)));
        assert_eq!(ix.pending_for(&target).count(), 0);
        assert!(!ix.remove(&key), "not pending: nothing to redraw");
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
