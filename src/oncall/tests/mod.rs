//! The report model with synthetic facts: each class, the own-pod reasons,
//! timeout source attribution, urgency order and the exact commands; the
//! fix text ([`fixes`]), CAPTF's verdict beside ours ([`captf`]), the lock
//! page and pod commands ([`page`]) and hostile values ([`hostile`]).

mod captf;
mod fixes;
mod hostile;
mod node;
mod page;

use std::time::{Duration, SystemTime};

use super::fix::{backend_labels, captf_backend_labels, fix_text, hcl_map, pinned_image};
use super::model::*;
use super::report::*;
use super::*;
use crate::core::lockinfo::parse_lock_info;
use crate::core::timeouts::{resolve, ClusterPolicies, JobsPolicy};
use crate::index::{
    CaptfStatus, CaptfView, ForceUnlocks, LockFacts, LockLease, ObjectKnown, PodFacts, PodRead,
    PodState, StateReadable,
};

pub(super) const NS: &str = "team-a";
pub(super) const POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

pub(super) fn lease(who: Option<&str>, created_ago: u64, now: SystemTime) -> LockLease {
    let suffix = state_suffix(NS, Kind::TerraformMachine, "web");
    let info = who.map(|w| {
        let created = chrono::DateTime::<chrono::Utc>::from(now - Duration::from_secs(created_ago));
        format!(
            r#"{{"ID":"3442fe8d-2b45","Operation":"OperationTypeApply","Who":"{w}","Version":"1.9.0","Created":"{}"}}"#,
            created.to_rfc3339()
        )
    });
    LockLease::new(
        NS.into(),
        suffix,
        Some("TerraformMachine"),
        Some("web".into()),
        // The backend writes holderIdentity and lock-info's ID from one ID.
        if who.is_some() {
            "3442fe8d-2b45"
        } else {
            "hid-1"
        }
        .into(),
        match info {
            Some(i) => parse_lock_info(&i).map(Some),
            None => Ok(None),
        },
    )
}

pub(super) fn facts(
    class: HolderClass,
    who: Option<&str>,
    age: u64,
    pod: Option<PodFacts>,
    now: SystemTime,
) -> LockFacts {
    LockFacts {
        namespace: NS.into(),
        kind: Some(Kind::TerraformMachine),
        kind_label: "TerraformMachine",
        name: "web".into(),
        object: ObjectKnown::Watched,
        lease: lease(who, age, now),
        class,
        first_seen_held: Some(now),
        resolved: resolve(Kind::TerraformMachine, None, None),
        pod,
        node: None,
        force_unlocks: ForceUnlocks::default(),
        force_unlock_events_present: None,
        captf: Default::default(),
        one_shot: false,
        starting: false,
    }
}

pub(super) const LEASE: &str = "lock-tfstate-default-1cc4ffb6d396d1c4-m";

#[test]
fn lease_name_is_the_objects() {
    assert_eq!(
        lock_lease_name(&state_suffix(NS, Kind::TerraformMachine, "web")),
        LEASE
    );
}

#[test]
fn exact_commands() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 10, None, now),
        now,
    );
    assert_eq!(r.lease, LEASE);
    assert_eq!(r.lock_id, "3442fe8d-2b45");
    assert_eq!(
        r.commands.lease,
        format!("kubectl get lease -n team-a {LEASE} -o yaml")
    );
    // A workstation host is no pod: no pod command (kubectl get pod would exit 1).
    assert_eq!(r.commands.pod, None);
    assert_eq!(
        r.commands.confirm,
        format!("kubectl get lease -n team-a {LEASE} -o jsonpath='{{.spec.holderIdentity}}'")
    );
    assert_eq!(
        r.commands.explain,
        "captf-lock-exporter explain terraformmachine/web -n team-a"
    );
}

#[test]
fn every_class_its_verdict_next_step_and_fix() {
    let now = SystemTime::now();
    let own = OwnVerdict::Own { pod: POD.into() };
    let who = format!("@{POD}");
    let live = PodFacts {
        name: POD.into(),
        cached: Some(PodState::new(false)),
        last_read: None,
    };
    let gone = PodFacts {
        name: POD.into(),
        cached: None,
        last_read: Some((PodRead::Gone, Some(now))),
    };
    let failed = PodFacts {
        name: POD.into(),
        cached: None,
        last_read: Some((PodRead::Failed, Some(now))),
    };
    let cases = [
        (
            HolderClass::OwnLive,
            Some(who.as_str()),
            Some(live),
            "Do not unlock",
        ),
        (
            HolderClass::OwnStale,
            Some(who.as_str()),
            Some(gone),
            "reconcile-nudge",
        ),
        (
            HolderClass::OwnUnverified,
            Some(who.as_str()),
            Some(failed),
            "Read it yourself",
        ),
        (
            HolderClass::Foreign,
            Some("alice@laptop"),
            None,
            "force-unlock -force -- 3442fe8d-2b45",
        ),
        (
            HolderClass::Unknown,
            None,
            None,
            "force-unlock -force -- hid-1",
        ),
    ];
    for (class, who, pod, fix_mark) in cases {
        let r = LockReport::build(&facts(class, who, 10, pod, now), now);
        assert_eq!(r.class, class);
        if class.as_str().starts_with("own") {
            assert_eq!(r.own, own, "{class}");
            let p = r.pod.as_ref().expect("pod report");
            assert_eq!(p.name, POD);
        }
        let mut out = String::new();
        fix_text(&r, None, &mut out);
        assert!(out.contains(fix_mark), "{class}: {out}");
    }
    let stale = LockReport::build(
        &facts(
            HolderClass::OwnStale,
            Some(&format!("@{POD}")),
            10,
            Some(PodFacts {
                name: POD.into(),
                cached: None,
                last_read: Some((PodRead::Gone, Some(now))),
            }),
            now,
        ),
        now,
    );
    assert!(stale
        .pod
        .as_ref()
        .is_some_and(|p| p.state.contains("gone") && p.read_at.is_some()));
    assert!(stale.captf_next.contains("next Job CAPTF starts"));
}

#[test]
fn not_own_reasons() {
    let now = SystemTime::now();
    let owner = Some((Kind::TerraformMachine, "web"));
    let reason = |who: Option<&str>, owner| match own_verdict(&lease(who, 1, now), owner) {
        OwnVerdict::NotOwn { why } => Some(why),
        OwnVerdict::Own { .. } => None,
    };
    assert_eq!(reason(None, owner), Some(NotOwn::NoLockInfo));
    assert_eq!(reason(Some("laptop"), owner), Some(NotOwn::NoAt));
    assert_eq!(reason(Some("alice@"), owner), Some(NotOwn::EmptyHost));
    assert_eq!(
        reason(Some(&format!("@{POD}")), None),
        Some(NotOwn::ObjectUnknown)
    );
    assert_eq!(
        reason(Some("@captf-m-web-1-apply-a1-abc123-x7k2p"), owner),
        Some(NotOwn::OtherObjectsPod {
            kind: Kind::TerraformMachine,
            name: "web-1".into()
        })
    );
    assert_eq!(
        reason(Some("@captf-mp-web-apply-a1-abc123-x7k2p"), owner),
        Some(NotOwn::OtherObjectsPod {
            kind: Kind::TerraformMachinePool,
            name: "web".into()
        })
    );
    assert_eq!(
        reason(Some("alice@laptop"), owner),
        Some(NotOwn::NotJobPodName)
    );
    assert_eq!(reason(Some(&format!("@{POD}")), owner), None);
}

#[test]
fn timeout_sources_all_four() {
    let p = |l: Option<i64>, d: Option<i64>| JobsPolicy {
        lock_timeout_seconds: l,
        active_deadline_seconds: d,
    };
    let now = SystemTime::now();
    let cases = [
        (
            Some(p(Some(11), None)),
            None,
            11,
            "own",
            "the object's own spec.jobs",
        ),
        (
            None,
            Some(ClusterPolicies {
                default_jobs: Some(p(Some(22), None)),
                jobs: Some(p(Some(99), None)),
            }),
            22,
            "cluster_defaults",
            "its TerraformCluster's spec.defaults.jobs",
        ),
        (
            None,
            Some(ClusterPolicies {
                default_jobs: None,
                jobs: Some(p(Some(33), Some(900))),
            }),
            33,
            "cluster_jobs",
            "its TerraformCluster's own spec.jobs",
        ),
        (None, None, 300, "built_in", "built-in (no spec sets it)"),
    ];
    for (own, cluster, want, source, words) in cases {
        let mut f = facts(HolderClass::Foreign, Some("a@b"), 10, None, now);
        f.resolved = resolve(Kind::TerraformMachine, own.as_ref(), cluster.as_ref());
        let r = LockReport::build(&f, now);
        assert_eq!(r.lock_timeout.seconds, want);
        assert_eq!(r.lock_timeout.source, source);
        assert_eq!(
            source_text(r.lock_timeout.source, Some(Kind::TerraformMachine)),
            words
        );
        assert!(r.captf_next.contains(&format!("waits {want} s")));
    }
}

#[test]
fn no_lock_is_overdue_while_its_timeout_is_still_being_listed() {
    let now = SystemTime::now();
    let mut f = facts(HolderClass::Foreign, Some("a@b"), 400, None, now);
    assert!(
        LockReport::build(&f, now).overdue,
        "400 s against the 300 s default"
    );
    f.starting = true;
    let r = LockReport::build(&f, now);
    assert!(
        !r.overdue && r.overdue_in().is_none(),
        "{:?}",
        (r.overdue, r.overdue_in())
    );
}

#[test]
fn overdue_and_urgency_order() {
    let now = SystemTime::now();
    let mk =
        |class, who: Option<&str>, age| LockReport::build(&facts(class, who, age, None, now), now);
    let mut rs = vec![
        mk(HolderClass::OwnLive, Some("@x"), 5000),
        mk(HolderClass::Unknown, None, 10),
        mk(HolderClass::Foreign, Some("a@b"), 10),
        mk(HolderClass::OwnUnverified, Some("@x"), 10),
        mk(HolderClass::OwnStale, Some("@x"), 10),
        mk(HolderClass::Unknown, Some("nohost"), 301),
        mk(HolderClass::Foreign, Some("a@b"), 400),
    ];
    assert!(rs[6].overdue && rs[5].overdue && !rs[2].overdue && !rs[0].overdue);
    sort_by_urgency(&mut rs);
    let order: Vec<(String, bool)> = rs
        .iter()
        .map(|r| (r.class.to_string(), r.overdue))
        .collect();
    let want = [
        ("foreign", true),
        ("unknown", true),
        ("own_stale", false),
        ("own_unverified", false),
        ("foreign", false),
        ("unknown", false),
        ("own_live", false),
    ];
    assert_eq!(order, want.map(|(c, o)| (c.to_string(), o)).to_vec());
}

pub(super) fn stale_facts(now: SystemTime) -> LockFacts {
    facts(
        HolderClass::OwnStale,
        Some(&format!("@{POD}")),
        60,
        Some(PodFacts {
            name: POD.into(),
            cached: None,
            last_read: Some((PodRead::Gone, Some(now))),
        }),
        now,
    )
}

pub(super) fn malformed_facts(now: SystemTime) -> LockFacts {
    let mut f = facts(HolderClass::Unknown, None, 60, None, now);
    f.lease = LockLease::new(
        NS.into(),
        state_suffix(NS, Kind::TerraformMachine, "web"),
        Some("TerraformMachine"),
        Some("web".into()),
        "hid-9".into(),
        parse_lock_info(r#"{"ID":"x","Who":"#).map(Some),
    );
    f
}
