//! The lost-node evidence as the index keeps it: joined from the lock to
//! its own runner pod and the pod's Node, kept up to date by every input
//! and by the clock, and marked for a redraw only when it moves.

use super::*;
use captf_core::node_lost::{CondStatus, LostReason, Taints};

fn secs(t: SystemTime) -> f64 {
    unix_seconds(t)
}

fn at(s: u64) -> SystemTime {
    t0() + Duration::from_secs(s)
}

fn web_key() -> LockKey {
    LockKey::new(NS, state_suffix(NS, Kind::TerraformMachine, "web"))
}

fn on_node(node: &str) -> PodState {
    PodState {
        node: PodNode::of(node),
        ..PodState::new(false)
    }
}

fn node(ready: CondStatus, since: SystemTime, taints: Taints) -> NodeEntry {
    NodeEntry {
        taints,
        ready_reason: "NodeStatusUnknown".into(),
        ..NodeEntry::with_ready(Some(ready), Some(secs(since)))
    }
}

fn node_key(name: &str) -> ObjectKey {
    ObjectKey::new("", name)
}

/// `web`'s lock, held by its own runner pod bound to `n1`.
fn held_on_n1() -> Index {
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.apply(ObjectKey::new(NS, WEB_POD), on_node("n1"), t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
    ix.take_changes();
    ix
}

fn lost(ix: &Index) -> Option<(String, LostReason, f64)> {
    ix.node_lost(&web_key())
        .map(|l| (l.node.to_string(), l.reason, l.since))
}

fn sync_nodes(ix: &mut Index, nodes: Vec<(&str, NodeEntry)>, now: SystemTime) {
    let items = nodes.into_iter().map(|(n, e)| (node_key(n), e)).collect();
    IndexResource::<NodeEntry>::reset(ix, &None, items, now);
}

const UNREACHABLE: Taints = Taints {
    not_ready: false,
    unreachable: true,
    out_of_service: false,
};

#[test]
fn a_node_that_stops_reporting_and_returns() {
    let mut ix = held_on_n1();
    sync_nodes(
        &mut ix,
        vec![("n1", node(CondStatus::True, t0(), Taints::default()))],
        at(1),
    );
    assert_eq!(lost(&ix), None);
    assert!(!ix.take_changed(), "a healthy node moves no series");
    // The node controller marks it Unknown and taints it.
    ix.apply(
        node_key("n1"),
        node(CondStatus::Unknown, at(40), UNREACHABLE),
        at(41),
    );
    assert_eq!(
        lost(&ix),
        Some(("n1".into(), LostReason::NodeUnreachable, secs(at(40))))
    );
    assert!(ix.take_changes().covers(&web_key()));
    // A heartbeat-only update of the same state moves nothing.
    ix.apply(
        node_key("n1"),
        node(CondStatus::Unknown, at(40), UNREACHABLE),
        at(90),
    );
    assert!(!ix.take_changed());
    // The kubelet is back: Ready, the taint still there for a moment.
    ix.apply(
        node_key("n1"),
        node(CondStatus::True, at(120), UNREACHABLE),
        at(121),
    );
    assert_eq!(lost(&ix), None);
    assert!(ix.take_changes().covers(&web_key()));
    // The class never moved.
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
}

#[test]
fn no_node_evidence_before_the_node_watch_syncs() {
    let mut ix = held_on_n1();
    // A Node change before any list (or with no Node watch at all).
    ix.apply(
        node_key("n1"),
        node(CondStatus::Unknown, at(40), UNREACHABLE),
        at(41),
    );
    assert_eq!(
        lost(&ix),
        None,
        "a missing Node is evidence only after a sync"
    );
    // The first sync judges every own lock again.
    sync_nodes(
        &mut ix,
        vec![("n1", node(CondStatus::Unknown, at(40), UNREACHABLE))],
        at(50),
    );
    assert_eq!(
        lost(&ix).map(|(_, r, _)| r),
        Some(LostReason::NodeUnreachable)
    );
}

#[test]
fn a_deleted_node_and_a_node_that_never_existed() {
    let mut ix = held_on_n1();
    sync_nodes(
        &mut ix,
        vec![("n1", node(CondStatus::Unknown, t0(), UNREACHABLE))],
        at(1),
    );
    IndexResource::<NodeEntry>::delete(&mut ix, node_key("n1"), at(300));
    assert_eq!(
        lost(&ix),
        Some(("n1".into(), LostReason::NodeDeleted, secs(at(300))))
    );
    // A relist without it keeps the deletion time.
    sync_nodes(&mut ix, vec![], at(400));
    assert_eq!(lost(&ix).map(|(.., s)| s), Some(secs(at(300))));
    // The pod moves to a node that never existed: missing from then.
    ix.apply(ObjectKey::new(NS, WEB_POD), on_node("ghost"), at(500));
    assert_eq!(
        lost(&ix),
        Some(("ghost".into(), LostReason::NodeDeleted, secs(at(500))))
    );
    // PodGC deletes the orphaned pod: no evidence (and the lock waits for
    // its live read, CAPTF's verdict).
    IndexResource::<PodState>::delete(&mut ix, ObjectKey::new(NS, WEB_POD), at(540));
    assert_eq!(lost(&ix), None);
}

#[test]
fn terminating_past_grace_turns_with_the_clock() {
    let mut ix = held_on_n1();
    // No Node watch: pod evidence alone. Deleted at t0 with 600 s grace.
    let terminating = PodState {
        deletion: Some(secs(at(600))),
        deletion_grace_seconds: Some(600),
        ..on_node("n1")
    };
    ix.apply(ObjectKey::new(NS, WEB_POD), terminating, at(1));
    assert_eq!(lost(&ix), None, "within its grace");
    let due = (secs(at(660)) * 1000.0) as i64;
    assert_eq!(ix.next_clock_deadline(), Some(due));
    assert!(ix.take_clock_moved());
    ix.take_changes();
    ix.node_lost_due(at(659));
    assert_eq!(lost(&ix), None);
    ix.node_lost_due(at(661));
    assert_eq!(
        lost(&ix),
        Some((
            "n1".into(),
            LostReason::PodTerminatingPastGrace,
            secs(at(600))
        ))
    );
    assert!(ix.take_changes().covers(&web_key()));
    assert_eq!(ix.next_clock_deadline(), None);
    // PodGC marks it Failed (out-of-service taint): own_stale, no evidence.
    let failed = PodState {
        finished: true,
        deletion: Some(secs(at(600))),
        ..on_node("n1")
    };
    ix.apply(ObjectKey::new(NS, WEB_POD), failed, at(700));
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnStale)
    );
    assert_eq!(lost(&ix), None);
}

#[test]
fn a_node_name_that_is_not_one_is_counted_and_changes_no_verdict() {
    let (mut ix, _) = web_locked_by_own_pod(None);
    sync_nodes(&mut ix, vec![], t0());
    let fx = ix.apply(ObjectKey::new(NS, WEB_POD), on_node("Bad_Name/.."), t0());
    assert_eq!(fx.invalid_node_names, 1);
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
    assert_eq!(lost(&ix), None, "no node to be lost");
    let long = "a".repeat(300);
    let fx = ix.apply(ObjectKey::new(NS, WEB_POD), on_node(&long), t0());
    assert_eq!(fx.invalid_node_names, 1);
}

#[test]
fn only_an_own_live_lock_has_evidence() {
    // A foreign lock: never.
    let mut ix = Index::new();
    ix.feed(
        Resource::Leases,
        lease_change(Kind::TerraformMachine, "web", Some(info("eve@laptop"))),
    );
    sync_nodes(&mut ix, vec![], t0());
    assert_eq!(lost(&ix), None);
    // Released: the evidence goes with the lock.
    let mut ix = held_on_n1();
    sync_nodes(&mut ix, vec![], at(1));
    assert!(lost(&ix).is_some());
    ix.feed(
        Resource::Leases,
        lease_change(Kind::TerraformMachine, "web", None),
    );
    assert_eq!(lost(&ix), None);
    assert!(ix.take_changes().covers(&web_key()));
}

#[test]
fn thousands_of_nodes_without_locks_move_nothing() {
    let mut ix = held_on_n1();
    let names: Vec<String> = (0..5000).map(|i| format!("node-{i}")).collect();
    let mut nodes: Vec<(&str, NodeEntry)> = names
        .iter()
        .map(|n| (n.as_str(), node(CondStatus::True, t0(), Taints::default())))
        .collect();
    nodes.push(("n1", node(CondStatus::True, t0(), Taints::default())));
    sync_nodes(&mut ix, nodes, at(1));
    ix.take_changes();
    for n in names.iter().take(100) {
        ix.apply(
            node_key(n),
            node(CondStatus::Unknown, at(5), UNREACHABLE),
            at(6),
        );
    }
    assert!(!ix.take_changed(), "no lock is held on those nodes");
    assert_eq!(ix.node_lost_count(), 0);
}
