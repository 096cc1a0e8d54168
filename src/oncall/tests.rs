//! The report model with synthetic facts: each class, the own-pod reasons,
//! timeout source attribution, urgency order and the exact commands.

use std::time::{Duration, SystemTime};

use super::fix::{
    backend_labels, captf_backend_labels, fix_text, hcl_map, pinned_image, FixInputs, Lookup,
};
use super::model::*;
use super::report::*;
use super::*;
use crate::core::lockinfo::parse_lock_info;
use crate::core::timeouts::{resolve, ClusterPolicies, JobsPolicy};
use crate::index::{
    CaptfStatus, CaptfView, ForceUnlocks, LockLease, PodRead, PodState, StateReadable,
};

const NS: &str = "team-a";
const POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

fn lease(who: Option<&str>, created_ago: u64, now: SystemTime) -> LockLease {
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

fn facts(
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
        force_unlocks: ForceUnlocks::default(),
        force_unlock_events_present: None,
        captf: Default::default(),
        one_shot: false,
        starting: false,
    }
}

const LEASE: &str = "lock-tfstate-default-1cc4ffb6d396d1c4-m";

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
        cached: Some(PodState { finished: false }),
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
            "force-unlock -force 3442fe8d-2b45",
        ),
        (
            HolderClass::Unknown,
            None,
            None,
            "force-unlock -force hid-1",
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

#[test]
fn foreign_fix_fills_every_value() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 400, None, now),
        now,
    );
    let labels = captf_backend_labels(Kind::TerraformMachine, "web", Some("prod"));
    let inputs = FixInputs {
        image: Lookup::Found {
            value: "ghcr.io/ex/mod@sha256:abc".into(),
            from: "x".into(),
        },
        labels: Lookup::Found {
            value: hcl_map(&labels),
            from: "y".into(),
        },
    };
    let mut out = String::new();
    fix_text(&r, Some(&inputs), &mut out);
    for want in [
        "IMAGE=ghcr.io/ex/mod@sha256:abc",
        r#"LABELS='{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.infrastructure.cluster.x-k8s.io/owner-name"="web","captf.io/managed"="true","cluster.x-k8s.io/cluster-name"="prod","clusterctl.cluster.x-k8s.io/move"=""}'"#,
        "-backend-config=secret_suffix=1cc4ffb6d396d1c4-m -backend-config=namespace=team-a",
        "\"$IMAGE\" force-unlock -force 3442fe8d-2b45",
        "\"kubernetes\": {}",
        &format!("kubectl get lease -n team-a {LEASE} -o jsonpath='{{.spec.holderIdentity}}'"),
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    // An unreadable image is named, with the command that reads it.
    let inputs = FixInputs {
        image: Lookup::Unreadable {
            why: "403".into(),
            read_with: "kubectl get secret x".into(),
        },
        labels: Lookup::Found {
            value: "{}".into(),
            from: "y".into(),
        },
    };
    let mut out = String::new();
    fix_text(&r, Some(&inputs), &mut out);
    assert!(
        out.contains("could not read the pinned image: 403")
            && out.contains("IMAGE=\"$(kubectl get secret x)\""),
        "{out}"
    );
}

#[test]
fn labels_images_and_kinds() {
    let mut l = std::collections::BTreeMap::new();
    for (k, v) in [
        ("tfstate", "true"),
        ("tfstateSecretSuffix", "s"),
        ("tfstateWorkspace", "default"),
        ("app.kubernetes.io/managed-by", "terraform"),
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-kind",
            "TerraformMachine",
        ),
        ("captf.io/managed", "true"),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    assert_eq!(
        hcl_map(&backend_labels(&l).expect("labels")),
        r#"{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.io/managed"="true"}"#
    );
    assert_eq!(
        pinned_image(None, "r.io/m@sha256:1").as_deref(),
        Some("r.io/m@sha256:1")
    );
    assert_eq!(
        pinned_image(Some("r.io:5000/m:v1"), "sha256:1").as_deref(),
        Some("r.io:5000/m@sha256:1")
    );
    assert_eq!(pinned_image(Some("r.io/m"), "").as_deref(), None);
    for s in [
        "terraformmachine",
        "TerraformMachine",
        "terraformmachines",
        "TERRAFORMMACHINES",
        "terraformmachines.infrastructure.cluster.x-k8s.io",
    ] {
        assert_eq!(parse_kind(s), Some(Kind::TerraformMachine), "{s}");
    }
    assert_eq!(
        parse_kind("terraformmachinepool"),
        Some(Kind::TerraformMachinePool)
    );
    // The short names of CAPTF's newest CRDs.
    assert_eq!(parse_kind("tfm"), Some(Kind::TerraformMachine));
    assert_eq!(parse_kind("TFC"), Some(Kind::TerraformCluster));
    assert_eq!(parse_kind("tfmp"), Some(Kind::TerraformMachinePool));
    assert_eq!(parse_kind("tfplan"), None, "a plan has no lock");
    assert_eq!(
        parse_kind("m"),
        None,
        "the Job-name short kind is not a CRD name"
    );
    assert!(parse_target("terraformcluster/prod").is_ok());
    assert!(parse_target("machine/x").is_err());
}

#[test]
fn hostile_values_are_quoted_in_commands() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(
            HolderClass::Foreign,
            Some("x@$(touch /tmp/p)"),
            10,
            None,
            now,
        ),
        now,
    );
    assert_eq!(
        r.commands.pod, None,
        "not a runner pod name: no pod command"
    );
    // A hostile value in a pod-named host is quoted too (and an invalid pod
    // name gets no command at all).
    let r = LockReport::build(
        &facts(
            HolderClass::OwnUnverified,
            Some("@captf-m-web-apply-a1-abc$(x)-x7k2p"),
            10,
            None,
            now,
        ),
        now,
    );
    assert_eq!(r.commands.pod, None);
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(out.contains("no name a pod can be read by"), "{out}");
}

fn captf_status(status: &str, reason: &str, message: &str, active_job: bool) -> CaptfView {
    CaptfView {
        status: Some(CaptfStatus {
            state_readable: Some(StateReadable::from_fields(
                status,
                reason,
                message,
                Some(1_796_032_800.0),
            )),
            active_job,
        }),
        disagreement: None,
        pending_plans: Vec::new(),
    }
}

#[test]
fn explain_shows_captfs_condition_and_says_it_agrees() {
    let now = SystemTime::now();
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 60, None, now);
    f.captf = captf_status(
        "False",
        "StateLocked",
        "The state lock id-1 is held by alice@laptop (OperationTypeApply); every Job waits lockTimeoutSeconds for it and fails.",
        false,
    );
    let r = LockReport::build(&f, now);
    assert_eq!(r.captf.agreement, "agrees");
    let text = render::evidence_text(&r);
    assert!(text.contains("  CAPTF says:    False/StateLocked since 2026-11-30T10:00:00Z: The state lock id-1 is held by alice@laptop"), "{text}");
    assert!(
        text.contains("  Verdicts:      agrees with the exporter"),
        "{text}"
    );
}

#[test]
fn explain_names_what_differs_and_a_running_job() {
    let now = SystemTime::now();
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 60, None, now);
    f.captf = captf_status("True", "StateRead", "", false);
    let r = LockReport::build(&f, now);
    assert_eq!(r.captf.agreement, "differs");
    let text = render::evidence_text(&r);
    assert!(
        text.contains("  Verdicts:      DIFFER: CAPTF reports the state readable (StateRead), the exporter sees a foreign holder"),
        "{text}"
    );
    f.captf = captf_status("True", "StateRead", "", true);
    let r = LockReport::build(&f, now);
    assert_eq!(r.captf.agreement, "not_compared");
    assert!(r.captf.text.contains("a Job of the object is running"));
}

#[test]
fn an_own_stale_lock_that_waits_for_a_plan_says_so_and_how_to_review_it() {
    let now = SystemTime::now();
    let pod = PodFacts {
        name: "captf-m-web-apply-a1-abc123-x7k2p".into(),
        cached: None,
        last_read: Some((PodRead::Gone, Some(now))),
    };
    let mut f = facts(
        HolderClass::OwnStale,
        Some("@captf-m-web-apply-a1-abc123-x7k2p"),
        60,
        Some(pod),
        now,
    );
    f.captf = captf_status("True", "StateRead", "", false);
    f.captf.pending_plans = vec!["web-plan-5d1c".into()];
    let r = LockReport::build(&f, now);
    assert_eq!(
        r.captf.pending_plans[0].review,
        "kubectl get tfplan -n team-a web-plan-5d1c -o yaml"
    );
    assert!(
        r.captf_next
            .contains("waits for the approval of TerraformPlan web-plan-5d1c"),
        "{}",
        r.captf_next
    );
    assert!(r.captf_next.contains(
        "Approving it applies the plan's changes; the exporter never approves anything."
    ));
    let text = render::evidence_text(&r);
    assert!(text.contains("  Pending plan:  web-plan-5d1c (review: kubectl get tfplan -n team-a web-plan-5d1c -o yaml)"), "{text}");
    // Without a pending plan nothing is said about approvals.
    f.captf.pending_plans.clear();
    assert!(!LockReport::build(&f, now).captf_next.contains("approval"));
}

fn stale_facts(now: SystemTime) -> LockFacts {
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

#[test]
fn own_stale_gives_the_exact_nudge_and_says_when_it_cannot_help() {
    let now = SystemTime::now();
    let r = LockReport::build(&stale_facts(now), now);
    let nudge = r#"kubectl annotate -n team-a terraformmachine web captf-lock-exporter/reconcile-nudge="$(date +%s)" --overwrite"#;
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(out.contains(nudge), "{out}");
    assert!(
        out.contains("A reconcile starts a Job only when one is due"),
        "the nudge is not offered as a cure for a lock nothing is due to clear:\n{out}"
    );
    // The lock page offers the same command.
    let page = crate::pages::evidence_html(&r);
    assert!(
        page.contains(&crate::pages::escape(nudge)),
        "the lock page lacks the nudge:\n{page}"
    );
}

#[test]
fn the_lock_page_of_an_unknown_lock_with_malformed_lock_info_shows_the_release_that_works() {
    let now = SystemTime::now();
    let mut f = facts(HolderClass::Unknown, None, 60, None, now);
    f.lease = LockLease::new(
        NS.into(),
        state_suffix(NS, Kind::TerraformMachine, "web"),
        Some("TerraformMachine"),
        Some("web".into()),
        "hid-9".into(),
        parse_lock_info(r#"{"ID":"x","Who":"#).map(Some),
    );
    let r = LockReport::build(&f, now);
    let release = format!(
        r#"kubectl patch lease -n team-a {LEASE} --type=json -p '[{{"op":"test","path":"/spec/holderIdentity","value":"hid-9"}},{{"op":"remove","path":"/spec/holderIdentity"}},{{"op":"remove","path":"/metadata/annotations/app.terraform.io~1lock-info"}}]'"#
    );
    let page = crate::pages::evidence_html(&r);
    assert!(
        page.contains(&crate::pages::escape(&release)),
        "missing the guarded release in\n{page}"
    );
    assert!(page.contains("force-unlock fails with any ID"), "{page}");
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(
        out.contains(&release) && !out.contains("force-unlock -force"),
        "{out}"
    );
}

#[test]
fn the_lock_page_says_force_unlock_takes_holder_identity() {
    let now = SystemTime::now();
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 60, None, now);
    f.lease.holder_identity = "hid-2".into();
    let r = LockReport::build(&f, now);
    assert_eq!(
        r.lock_id, "3442fe8d-2b45",
        "the alert's lock_id stays lock-info's ID"
    );
    let page = crate::pages::evidence_html(&r);
    assert!(
        page.contains("# spec.holderIdentity: the ID force-unlock takes"),
        "{page}"
    );
    assert!(
        page.contains("lock-info's ID is not spec.holderIdentity"),
        "{page}"
    );
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(
        out.contains("force-unlock -force hid-2")
            && !out.contains("force-unlock -force 3442fe8d-2b45"),
        "{out}"
    );
}

fn malformed_facts(now: SystemTime) -> LockFacts {
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

#[test]
fn one_shot_explain_of_an_unparseable_lock_says_the_age_is_unknown() {
    let now = SystemTime::now();
    let mut f = malformed_facts(now);
    // What the exporter's index says after watching it for 10 minutes.
    f.first_seen_held = Some(now - Duration::from_secs(600));
    let watched = LockReport::build(&f, now);
    assert!(watched.age_known && watched.overdue, "{watched:?}");
    // What a one-shot command sees: first seen "now", nothing observed.
    f.first_seen_held = Some(now);
    f.one_shot = true;
    let r = LockReport::build(&f, now);
    assert!(
        !r.age_known && !r.overdue && r.overdue_in().is_none(),
        "{r:?}"
    );
    let text = render::evidence_text(&r);
    assert!(
        text.contains("Age:           unknown (lock-info has no usable Created"),
        "{text}"
    );
    assert!(text.contains("Overdue:       unknown"), "{text}");
    for never in ["(from observed)", "becomes overdue in", "Age:           0s"] {
        assert!(!text.contains(never), "one-shot says {never:?}:\n{text}");
    }
    let table = render::locks_output(std::slice::from_ref(&r), render::Output::Table);
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(row.contains(" ? "), "{table}");
    // With a Created the age is known one-shot too.
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 900, None, now);
    f.one_shot = true;
    let r = LockReport::build(&f, now);
    assert!(r.age_known && r.overdue && r.age_source == "lock_info");
}

#[test]
fn a_finished_pod_is_never_said_to_wait_for_a_live_read() {
    let now = SystemTime::now();
    let mut f = stale_facts(now);
    f.pod = Some(PodFacts {
        name: POD.into(),
        cached: Some(PodState { finished: true }),
        last_read: None,
    });
    let r = LockReport::build(&f, now);
    let state = &r.pod.as_ref().expect("pod").state;
    assert!(!state.contains("pending"), "{state}");
    assert!(
        state.contains("watch cache") && state.contains("finished"),
        "{state}"
    );
    f.one_shot = true;
    let r = LockReport::build(&f, now);
    let text = render::evidence_text(&r);
    assert!(
        text.contains("Succeeded or Failed (listed just now): finished"),
        "{text}"
    );
    assert!(!text.contains("pending"), "{text}");
}

#[test]
fn pod_commands_only_for_runner_named_hosts_and_they_exit_zero_when_gone() {
    let now = SystemTime::now();
    let own = LockReport::build(&stale_facts(now), now);
    assert_eq!(
        own.commands.pod.as_deref(),
        Some(
            format!("kubectl get pods -n team-a --field-selector metadata.name={POD} -o wide")
                .as_str()
        )
    );
    let other = "captf-m-db-apply-a1-abc123-x7k2p";
    let r = LockReport::build(
        &facts(
            HolderClass::Foreign,
            Some(&format!("@{other}")),
            10,
            None,
            now,
        ),
        now,
    );
    assert!(
        r.commands
            .pod
            .as_deref()
            .is_some_and(|c| c.ends_with(&format!("metadata.name={other} -o wide"))),
        "{:?}",
        r.commands.pod
    );
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(
        out.contains("named like a CAPTF runner pod of\n     another object"),
        "{out}"
    );
    let ws = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 10, None, now),
        now,
    );
    assert_eq!(ws.commands.pod, None);
    let mut out = String::new();
    fix_text(&ws, None, &mut out);
    assert!(!out.contains("kubectl get pod"), "{out}");
    assert!(
        out.contains("the host laptop is not a CAPTF runner pod"),
        "{out}"
    );
    assert!(!crate::pages::evidence_html(&ws).contains("kubectl get pod"));
}

#[test]
fn the_manual_force_unlock_names_opentofu_and_terraform() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 10, None, now),
        now,
    );
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(out.contains("TF=tofu\n"), "{out}");
    assert!(out.contains("\"$TF\" init -input=false"), "{out}");
    assert!(
        out.contains("&& \"$TF\" force-unlock -force 3442fe8d-2b45)"),
        "{out}"
    );
    assert!(out.contains("(Version 1.9.0 is an OpenTofu or a"), "{out}");
    assert!(!out.contains("terraform init"), "{out}");
}

#[test]
fn a_refused_guarded_patch_is_explained() {
    let now = SystemTime::now();
    let r = LockReport::build(&malformed_facts(now), now);
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(
        out.contains(
            "kubectl printing \"The request is invalid: the server rejected our request due to an error\n     in our request\" (HTTP 422) means the test failed"
        ),
        "{out}"
    );
    assert!(
        crate::pages::evidence_html(&r).contains("The request is invalid"),
        "the page says it too"
    );
}
