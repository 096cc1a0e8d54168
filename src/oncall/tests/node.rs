//! The holder's node in the report: `explain`'s lines, the lost-node fix
//! with the node's name filled in (the taint only after the confirmation),
//! the wide table's columns and the lock page.

use std::time::SystemTime;

use super::*;
use crate::core::node_lost::{CondStatus, LostReason, Taints};
use crate::index::{unix_seconds, NodeEntry, NodeFacts, NodeLost, NodeView, PodNode};
use crate::oncall::render::{evidence_text, locks_output, Output};

/// `web`'s own live lock, its pod terminating on node `node`, the Node
/// unreachable since `since` (None: Nodes not seen).
fn lost_on(node: &str, seen: bool, now: SystemTime) -> LockFacts {
    let since = unix_seconds(now) - 900.0;
    let pod = PodState {
        node: PodNode::of(node),
        deletion: Some(since + 600.0),
        deletion_grace_seconds: Some(600),
        ready: Some(CondStatus::False),
        disruption_target: Some(CondStatus::True),
        ..PodState::new(false)
    };
    let who = format!("@{POD}");
    let mut f = facts(
        HolderClass::OwnLive,
        Some(&who),
        1200,
        Some(PodFacts {
            name: POD.into(),
            cached: Some(pod),
            last_read: None,
        }),
        now,
    );
    let entry = NodeEntry {
        ready: Some(CondStatus::Unknown),
        ready_reason: "NodeStatusUnknown".into(),
        ready_since: Some(since),
        taints: Taints {
            unreachable: true,
            ..Taints::default()
        },
    };
    f.node = Some(NodeFacts {
        name: node.into(),
        watched: seen,
        node: seen.then_some(NodeView {
            entry,
            observed_since: now,
        }),
        lost: Some(NodeLost {
            node: node.into(),
            reason: if seen {
                LostReason::NodeUnreachable
            } else {
                LostReason::PodTerminatingPastGrace
            },
            since,
        }),
    });
    f
}

#[test]
fn explain_shows_the_node_and_the_fix_with_its_name_confirmation_first() {
    let now = SystemTime::now();
    let r = LockReport::build(&lost_on("worker-1", true, now), now);
    let text = evidence_text(&r);
    for want in [
        "Node worker-1: Ready=Unknown (NodeStatusUnknown) since ",
        "taints node.kubernetes.io/unreachable",
        "Pod deletion:  terminating: grace of 600 s ends at ",
        "Ready=False, DisruptionTarget=True",
        "Node lost:     LOST (node_unreachable) since ",
        "(15m",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let mut fix = String::new();
    fix_text(&r, None, &mut fix);
    let confirm = fix.find("kubectl get node worker-1 -o wide");
    let taint = fix.find(
        "kubectl taint node worker-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute\n",
    );
    assert!(
        confirm.is_some() && taint.is_some() && confirm < taint,
        "the confirmation comes before the taint:\n{fix}"
    );
    assert!(fix.contains("kubectl delete node worker-1"), "{fix}");
    assert!(fix.contains("Never force-unlock"), "{fix}");
    assert!(!fix.contains("Let it finish"), "{fix}");
}

#[test]
fn a_namespaced_install_says_it_does_not_see_nodes() {
    let now = SystemTime::now();
    let r = LockReport::build(&lost_on("worker-1", false, now), now);
    let text = evidence_text(&r);
    assert!(
        text.contains("not seen: this install does not read Nodes")
            && text.contains("LOST (pod_terminating_past_grace)"),
        "{text}"
    );
}

#[test]
fn a_live_runner_on_a_healthy_node_keeps_the_old_fix() {
    let now = SystemTime::now();
    let mut f = lost_on("worker-1", true, now);
    if let Some(n) = &mut f.node {
        n.lost = None;
    }
    let r = LockReport::build(&f, now);
    assert!(evidence_text(&r).contains("Node lost:     not lost"));
    let mut fix = String::new();
    fix_text(&r, None, &mut fix);
    assert!(
        fix.contains("Let it finish") && !fix.contains("kubectl taint"),
        "{fix}"
    );
}

#[test]
fn wide_shows_node_and_reason() {
    let now = SystemTime::now();
    let lost = LockReport::build(&lost_on("worker-1", true, now), now);
    let other = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 10, None, now),
        now,
    );
    let out = locks_output(&[lost, other], Output::Wide);
    let mut lines = out.lines();
    let head = lines.next().unwrap_or_default();
    assert!(head.ends_with("NODE       NODE LOST"), "{head}");
    let row = lines.next().unwrap_or_default();
    assert!(row.ends_with("worker-1   node_unreachable"), "{row}");
    let row = lines.next().unwrap_or_default();
    assert!(row.ends_with("-          -"), "{row}");
    // The plain table stays as it was.
    let plain = locks_output(&[], Output::Table);
    assert!(!plain.contains("NODE"), "{plain}");
}

#[test]
fn a_hostile_node_reason_is_shown_escaped() {
    let now = SystemTime::now();
    let mut f = lost_on("worker-1", true, now);
    if let Some(NodeFacts {
        node: Some(view), ..
    }) = &mut f.node
    {
        view.entry.ready_reason = "x\u{1b}]52;c;AAAA\u{7}".into();
    }
    let r = LockReport::build(&f, now);
    let text = evidence_text(&r);
    assert!(
        !text.contains('\u{1b}') && text.contains("\\u{1b}"),
        "{text}"
    );
}

#[test]
fn the_lock_page_shows_the_node_and_the_fix() {
    let now = SystemTime::now();
    let r = LockReport::build(&lost_on("worker-1", true, now), now);
    let page = crate::pages::evidence_html(&r);
    for want in [
        "<dt>Node</dt><dd><code>worker-1</code>: Ready=Unknown (NodeStatusUnknown) since ",
        "<span id=\"node-lost\">LOST (node_unreachable) since ",
        "# the runbook's fix for a lost node",
        "kubectl taint node worker-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
    ] {
        assert!(page.contains(want), "missing {want:?} in\n{page}");
    }
}
