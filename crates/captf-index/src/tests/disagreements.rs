//! CAPTF's verdict beside ours: the disagreement, its grace, an active
//! Job, and the plans an apply waits for, through the typed inputs.

use super::*;
use captf_core::captf_verdict::Difference;

const GRACE: Duration = Duration::from_secs(600);

fn at(secs: u64) -> SystemTime {
    t0() + Duration::from_secs(secs)
}

fn condition(status: &str, reason: &str, message: &str) -> StateReadable {
    StateReadable::from_fields(status, reason, message, None)
}

fn locked_by(who: &str) -> StateReadable {
    condition(
        "False",
        "StateLocked",
        &format!("The state lock lock-1 is held by {who} (OperationTypeApply); every Job waits lockTimeoutSeconds for it and fails. Release it with force-unlock once that holder is gone; see the stale-lock runbook"),
    )
}

fn read() -> StateReadable {
    condition("True", "StateRead", "The state was read")
}

/// The TerraformMachine `web` with CAPTF's status.
fn web(cond: Option<StateReadable>, active_job: bool) -> Change {
    let mut c = object(Kind::TerraformMachine, "web", None, None, None);
    if let Some(Entry::Object(o)) = &mut c.entry {
        o.captf = CaptfStatus {
            state_readable: cond,
            active_job,
        };
    }
    c
}

fn feed_at(ix: &mut Index, resource: Resource, c: Change, secs: u64) {
    feed(ix, resource, c, at(secs));
}

/// `verdict_mismatch` of (kind, name) as `/metrics` would render it.
fn mismatch(ix: &Index, kind: Kind, name: &str) -> Option<bool> {
    let mut out = None;
    ix.for_each_lock(|v| {
        if v.object.kind == kind.as_str() && v.object.name == name {
            out = Some(v.object.mismatch);
        }
    });
    ix.for_each_unlocked_object(|v| {
        if v.kind == kind.as_str() && v.name == name {
            out = Some(v.mismatch);
        }
    });
    out
}

/// Runs the once-a-second check at `secs`; returns what it reported.
fn tick(ix: &mut Index, secs: u64) -> Vec<MismatchLog> {
    if !ix.verdict_mismatch_due(at(secs)) {
        return Vec::new();
    }
    ix.newly_mismatched(at(secs))
}

fn new_index() -> Index {
    let mut ix = Index::new();
    ix.set_verdict_grace(GRACE);
    ix
}

#[test]
fn captf_locked_but_released_is_reported_only_after_the_grace() {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), false),
        0,
    );
    feed_at(&mut ix, Resource::Leases, lease_change(m, "web", None), 0);
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
    assert!(tick(&mut ix, 599).is_empty(), "within the grace");
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
    let reported = tick(&mut ix, 601);
    assert_eq!(reported.len(), 1);
    assert_eq!(
        reported[0].disagreement.difference,
        Difference::LockedButReleased
    );
    assert_eq!(
        (reported[0].kind, reported[0].name.as_str()),
        ("TerraformMachine", "web")
    );
    assert_eq!(mismatch(&ix, m, "web"), Some(true));
    assert!(tick(&mut ix, 700).is_empty(), "reported once");
    // CAPTF reconciles and agrees: cleared at once.
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(read()), false),
        710,
    );
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
}

#[test]
fn an_object_without_a_lock_lease_is_compared_too() {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), false),
        0,
    );
    assert_eq!(tick(&mut ix, 601).len(), 1);
    assert_eq!(mismatch(&ix, m, "web"), Some(true));
    // Deleted: forgotten with it.
    feed_at(&mut ix, Resource::TerraformMachines, gone("web"), 602);
    assert_eq!(mismatch(&ix, m, "web"), None);
    assert!(ix
        .captf_view(&LockKey::new(NS, state_suffix(NS, m, "web")))
        .disagreement
        .is_none());
}

#[test]
fn an_active_job_holds_the_comparison_and_its_end_restarts_the_grace() {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(&mut ix, Resource::Leases, lease_change(m, "web", None), 0);
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), true),
        0,
    );
    assert!(
        tick(&mut ix, 2_000).is_empty(),
        "CAPTF does not look while a Job runs"
    );
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
    // The Job ends; the condition still describes the lock before it.
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), false),
        2_000,
    );
    assert!(tick(&mut ix, 2_599).is_empty());
    assert_eq!(tick(&mut ix, 2_601).len(), 1);
    // A Job starting again clears the flag.
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), true),
        2_700,
    );
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
}

#[test]
fn the_same_foreign_holder_agrees_and_another_one_does_not() {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), false),
        0,
    );
    feed_at(
        &mut ix,
        Resource::Leases,
        lease_change(m, "web", Some(info("alice@laptop"))),
        0,
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::Foreign));
    assert!(tick(&mut ix, 5_000).is_empty());
    // The lock is taken over by someone else; CAPTF's condition lags.
    feed_at(
        &mut ix,
        Resource::Leases,
        lease_change(m, "web", Some(info("bob@desk"))),
        5_000,
    );
    let reported = tick(&mut ix, 5_601);
    assert_eq!(
        reported.first().map(|r| r.disagreement.difference.clone()),
        Some(Difference::OtherHolder {
            named: "alice@laptop".into()
        })
    );
}

/// CAPTF says it read `web`'s state while alice holds its lock (at 0 s).
fn read_but_held_by_alice() -> Index {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(read()), false),
        0,
    );
    feed_at(
        &mut ix,
        Resource::Leases,
        lease_change(m, "web", Some(info("alice@laptop"))),
        0,
    );
    ix
}

#[test]
fn captf_read_but_a_foreign_holder_and_an_own_runner_under_captf_locked() {
    let mut ix = read_but_held_by_alice();
    let m = Kind::TerraformMachine;
    let r = tick(&mut ix, 601);
    assert_eq!(
        r.first().map(|r| r.disagreement.difference.clone()),
        Some(Difference::ReadButForeign(HolderClass::Foreign))
    );
    // Now an own live runner holds it, and CAPTF says StateLocked.
    feed_at(&mut ix, Resource::Pods, pod(WEB_POD, false), 700);
    feed_at(
        &mut ix,
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
        700,
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    assert_eq!(mismatch(&ix, m, "web"), Some(false), "agrees: cleared");
    feed_at(
        &mut ix,
        Resource::TerraformMachines,
        web(Some(locked_by("alice@laptop")), false),
        700,
    );
    let r = tick(&mut ix, 1_301);
    assert_eq!(
        r.first().map(|r| r.disagreement.difference.clone()),
        Some(Difference::LockedButOwn(HolderClass::OwnLive))
    );
}

#[test]
fn other_reasons_say_nothing() {
    let mut ix = new_index();
    let m = Kind::TerraformMachine;
    feed_at(
        &mut ix,
        Resource::Leases,
        lease_change(m, "web", Some(info("alice@laptop"))),
        0,
    );
    for (status, reason) in [
        ("False", "StateCorrupt"),
        ("False", "StateLost"),
        ("Unknown", "StateNotFound"),
    ] {
        feed_at(
            &mut ix,
            Resource::TerraformMachines,
            web(Some(condition(status, reason, "x")), false),
            0,
        );
        assert!(tick(&mut ix, 10_000).is_empty(), "{reason}");
    }
    feed_at(&mut ix, Resource::TerraformMachines, web(None, false), 0);
    assert!(tick(&mut ix, 10_000).is_empty());
}

#[test]
fn a_pending_plan_names_the_object_it_holds_up() {
    let mut ix = new_index();
    let c = Kind::TerraformCluster;
    feed_at(
        &mut ix,
        Resource::TerraformClusters,
        object(c, "prod", None, None, None),
        0,
    );
    let plan = |pending| Change {
        key: (NS.into(), "prod-plan-7".into()),
        entry: Some(Entry::Plan(PlanEntry {
            target_kind: c,
            target_name: "prod".into(),
            pending,
        })),
    };
    let plans_of = |ix: &Index| {
        let mut out = Vec::new();
        ix.for_each_unlocked_object(|v| {
            if v.name == "prod" {
                out = v.pending_plans.iter().map(|p| p.to_string()).collect();
            }
        });
        out
    };
    feed_at(&mut ix, Resource::TerraformPlans, plan(true), 0);
    assert_eq!(plans_of(&ix), ["prod-plan-7"]);
    let key = LockKey::new(NS, state_suffix(NS, c, "prod"));
    assert_eq!(ix.captf_view(&key).pending_plans, ["prod-plan-7"]);
    feed_at(&mut ix, Resource::TerraformPlans, plan(false), 1);
    assert!(plans_of(&ix).is_empty());
    feed_at(&mut ix, Resource::TerraformPlans, plan(true), 2);
    relist(&mut ix, Resource::TerraformPlans, Some(NS), vec![], at(3));
    assert!(plans_of(&ix).is_empty(), "a relist without it deletes it");
}

#[test]
fn the_read_model_says_mismatch_as_metrics_does() {
    let mut ix = read_but_held_by_alice();
    let m = Kind::TerraformMachine;
    let key = LockKey::new(NS, state_suffix(NS, m, "web"));
    let facts_say = |ix: &Index| ix.facts(&key).map(|f| f.mismatch());
    assert_eq!(facts_say(&ix), Some(false));
    assert_eq!(mismatch(&ix, m, "web"), Some(false));
    assert_eq!(tick(&mut ix, 601).len(), 1);
    assert_eq!(facts_say(&ix), Some(true));
    assert_eq!(mismatch(&ix, m, "web"), Some(true));
}
