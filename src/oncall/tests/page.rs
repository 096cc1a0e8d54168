//! The lock page, unparseable lock-info and the pod commands.

use std::time::SystemTime;

use super::*;

#[test]
fn the_lock_page_of_an_unknown_lock_with_malformed_lock_info_shows_the_release_that_works() {
    let now = SystemTime::now();
    let r = LockReport::build(&malformed_facts(now), now);
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
        out.contains("force-unlock -force -- hid-2")
            && !out.contains("force-unlock -force -- 3442fe8d-2b45"),
        "{out}"
    );
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
    assert!(text.contains("OverdueLog:       unknown"), "{text}");
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
        cached: Some(PodState::new(true)),
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
