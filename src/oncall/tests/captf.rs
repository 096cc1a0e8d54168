//! CAPTF's own verdict beside the exporter's, pending plans, the nudge.

use std::time::SystemTime;

use super::*;
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
