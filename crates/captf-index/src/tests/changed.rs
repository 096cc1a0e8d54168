//! Writes that change nothing `/metrics` shows leave the exposition
//! current: the index says so through `take_changed`.

use super::*;

#[test]
fn repeated_and_empty_writes_change_nothing() {
    let m = Kind::TerraformMachine;
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    assert!(ix.take_changed(), "the first writes change the exposition");
    // The same object again (CAPTF wrote a status field the exporter drops).
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    assert!(!ix.take_changed(), "an identical object");
    // The holder pod written again, still running: no class moves.
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    assert!(!ix.take_changed(), "an identical pod");
    // A pod no lock names comes and goes.
    ix.feed(
        Resource::Pods,
        pod("captf-m-other-apply-a1-abc123-x7k2p", false),
    );
    ix.feed(Resource::Pods, gone("captf-m-other-apply-a1-abc123-x7k2p"));
    assert!(!ix.take_changed(), "a pod no lock names");
    // Deletes of what was never kept: an Event the client filter dropped,
    // an object, a plan.
    ix.feed(Resource::Events, gone("some-event"));
    ix.feed(Resource::TerraformMachines, gone("never-seen"));
    ix.feed(Resource::TerraformPlans, gone("never-seen"));
    assert!(!ix.take_changed(), "deletes of unknown keys");
    // The same Lease again.
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    assert!(!ix.take_changed(), "an identical Lease");
}

#[test]
fn every_visible_change_is_marked() {
    let m = Kind::TerraformMachine;
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.take_changed();
    // The holder pod fails: the class moves to own_stale.
    ix.feed(Resource::Pods, pod(WEB_POD, true));
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnStale));
    assert!(ix.take_changed(), "a class change");
    ix.feed(Resource::Leases, lease_change(m, "web", None));
    assert!(ix.take_changed(), "a release");
    ix.feed(
        Resource::TerraformMachines,
        machine_with_lock_timeout("web", 60),
    );
    assert!(ix.take_changed(), "a new timeout");
    ix.feed(Resource::TerraformMachines, gone("web"));
    assert!(ix.take_changed(), "an object deleted");
}
