//! Each key family's own lines: one key in, the exact lines out, written
//! here by hand; and every line's label names are the family's.

use super::super::families::Family;
use super::super::key_families::{self as f, KEY_FAMILIES};
use super::super::render::lines_of;
use super::super::subject::{HeldLock, Subject};
use crate::core::captf_verdict::StateReadable;
use crate::core::node_lost::LostReason;
use crate::core::timeouts::Effective;
use crate::index::{CaptfStatus, ForceUnlocks, NodeLost, ObjectRef, ObjectView};

const OBJ: &str = r#"namespace="ns",kind="TerraformMachine",name="web""#;

fn status() -> CaptfStatus {
    CaptfStatus {
        state_readable: Some(StateReadable::from_fields(
            "False",
            "StateLocked",
            "held by bob",
            None,
        )),
        active_job: true,
    }
}

fn view<'a>(captf: Option<&'a CaptfStatus>, busy: bool) -> ObjectView<'a> {
    ObjectView {
        namespace: "ns",
        kind: "TerraformMachine",
        name: "web",
        effective: Effective {
            lock_timeout_seconds: 900,
            active_deadline_seconds: 3600,
        },
        captf,
        mismatch: busy,
        pending_plans: if busy { vec!["plan-1"] } else { vec![] },
    }
}

fn held(lost: &NodeLost) -> HeldLock<'_> {
    HeldLock {
        class: "foreign",
        operation: "OperationTypeApply",
        holder: "bob@laptop",
        lock_id: "id-1",
        version: "1.9.0",
        age_source: "lock_info",
        acquired: 1_700_000_000.0,
        age: 42.5,
        created: Some(1_700_000_000.0),
        overdue: true,
        node_lost: Some(lost),
    }
}

fn lost() -> NodeLost {
    NodeLost {
        node: "node-a".into(),
        reason: LostReason::NodeUnreachable,
        since: 1_700_000_050.0,
    }
}

/// A key with everything to tell: a held foreign lock, CAPTF's condition,
/// a mismatch, an active Job, a pending plan, two counters (its own and
/// one kept under another name of the same lock).
fn busy<'a>(view: &'a ObjectView<'a>, lost: &'a NodeLost) -> Subject<'a> {
    let fu = |total, last_seen| ForceUnlocks { total, last_seen };
    Subject {
        object: ["ns", "TerraformMachine", "web"],
        view,
        lock: Some(held(lost)),
        held: true,
        counters: vec![
            (
                ObjectRef::new("ns", "TerraformMachine", "web"),
                fu(2, Some(1_700_000_100.0)),
            ),
            (
                ObjectRef::new("ns", "TerraformMachine", "web2"),
                fu(0, None),
            ),
        ],
    }
}

/// A free lock's object with nothing else.
fn quiet<'a>(view: &'a ObjectView<'a>) -> Subject<'a> {
    Subject {
        object: ["ns", "TerraformMachine", "web"],
        view,
        lock: None,
        held: false,
        counters: vec![],
    }
}

#[test]
fn each_family_writes_exactly_its_lines() {
    let s = status();
    let (busy_view, quiet_view) = (view(Some(&s), true), view(None, false));
    let lost = lost();
    let (busy, quiet) = (busy(&busy_view, &lost), quiet(&quiet_view));
    let web2 = r#"namespace="ns",kind="TerraformMachine",name="web2""#;
    let cases: [(&Family, String, String); 15] = [
        (
            &f::LOCK_INFO,
            format!("captf_state_lock_info{{{OBJ},class=\"foreign\",operation=\"OperationTypeApply\",holder=\"bob@laptop\",lock_id=\"id-1\",version=\"1.9.0\"}} 1.0\n"),
            String::new(),
        ),
        (
            &f::LOCK_ACQUIRED,
            format!("captf_state_lock_acquired_timestamp_seconds{{{OBJ},class=\"foreign\",age_source=\"lock_info\"}} 1700000000.0\n"),
            String::new(),
        ),
        (
            &f::LOCK_AGE,
            format!("captf_state_lock_age_seconds{{{OBJ},class=\"foreign\",age_source=\"lock_info\"}} 42.5\n"),
            String::new(),
        ),
        (
            &f::LOCK_CREATED,
            format!("captf_state_lock_created_timestamp_seconds{{{OBJ}}} 1700000000.0\n"),
            String::new(),
        ),
        (
            &f::LOCK_OVERDUE,
            format!("captf_state_lock_overdue{{{OBJ},class=\"foreign\"}} 1.0\n"),
            String::new(),
        ),
        (
            &f::HOLDER_NODE_LOST,
            format!("captf_state_lock_holder_node_lost_timestamp_seconds{{{OBJ},node=\"node-a\",reason=\"node_unreachable\"}} 1700000050.0\n"),
            String::new(),
        ),
        (
            &f::HELD,
            format!("captf_state_lock_held{{{OBJ}}} 1.0\n"),
            format!("captf_state_lock_held{{{OBJ}}} 0.0\n"),
        ),
        (
            &f::TIMEOUT,
            format!("captf_state_lock_timeout_seconds{{{OBJ}}} 900.0\n"),
            format!("captf_state_lock_timeout_seconds{{{OBJ}}} 900.0\n"),
        ),
        (
            &f::DEADLINE,
            format!("captf_state_lock_deadline_seconds{{{OBJ}}} 3600.0\n"),
            format!("captf_state_lock_deadline_seconds{{{OBJ}}} 3600.0\n"),
        ),
        (
            &f::CAPTF_CONDITION,
            format!("captf_state_lock_captf_condition{{{OBJ},status=\"False\",reason=\"StateLocked\"}} 1.0\n"),
            String::new(),
        ),
        (
            &f::VERDICT_MISMATCH,
            format!("captf_state_lock_verdict_mismatch{{{OBJ}}} 1.0\n"),
            format!("captf_state_lock_verdict_mismatch{{{OBJ}}} 0.0\n"),
        ),
        (
            &f::JOB_ACTIVE,
            format!("captf_state_lock_job_active{{{OBJ}}} 1.0\n"),
            String::new(),
        ),
        (
            &f::PLAN_PENDING,
            format!("captf_state_lock_plan_pending{{{OBJ},plan=\"plan-1\"}} 1.0\n"),
            String::new(),
        ),
        (
            &f::FORCE_UNLOCKS,
            format!("captf_state_lock_force_unlocks_total{{{OBJ}}} 2\ncaptf_state_lock_force_unlocks_total{{{web2}}} 0\n"),
            String::new(),
        ),
        (
            &f::LAST_FORCE_UNLOCK,
            format!("captf_state_lock_last_force_unlock_timestamp_seconds{{{OBJ}}} 1700000100.0\n"),
            String::new(),
        ),
    ];
    assert_eq!(cases.len(), KEY_FAMILIES.len(), "a case per family");
    for (family, want_busy, want_quiet) in &cases {
        assert_eq!(lines_of(family, &busy), *want_busy, "{family:?}, busy");
        assert_eq!(lines_of(family, &quiet), *want_quiet, "{family:?}, quiet");
    }
}

/// The label names of a sample line, in order.
fn label_names(line: &str) -> Vec<&str> {
    let Some((_, rest)) = line.split_once('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut rest = rest;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(','));
        // Values here carry no escaped quote.
        rest = after.split_once('"').map_or("", |(_, r)| r);
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

#[test]
fn every_line_has_its_familys_label_names_and_name() {
    let s = status();
    let (v, lost) = (view(Some(&s), true), lost());
    let subject = busy(&v, &lost);
    for family in KEY_FAMILIES {
        let text = lines_of(family, &subject);
        assert!(
            !text.is_empty(),
            "{family:?} writes a line for the busy key"
        );
        for line in text.lines() {
            assert_eq!(label_names(line), family.labels(), "{line}");
            let name = line.split('{').next().unwrap_or("");
            assert_eq!(name, family.series_name(), "{line}");
        }
    }
}
