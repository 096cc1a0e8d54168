//! Pods and Nodes as the lost-node evidence reads them.

use super::*;
use crate::core::node_lost::Taints;
use serde_json::json;

fn pod_of(v: serde_json::Value) -> Option<PodState> {
    let obj: PodObject = serde_json::from_value(v).expect("decodes");
    pod(&obj).1
}

fn node_of(v: serde_json::Value) -> (ObjectKey, Option<NodeEntry>) {
    let obj: NodeObject = serde_json::from_value(v).expect("decodes");
    node(&obj)
}

#[test]
fn a_terminating_runner_pod_keeps_its_node_deletion_and_conditions() {
    let p = pod_of(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {MANAGED_LABEL: "true"},
            "deletionTimestamp": "2027-01-15T08:10:00Z", "deletionGracePeriodSeconds": 600},
        "spec": {"nodeName": "worker-1", "containers": [{"name": "runner"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
            {"type": "PodScheduled", "status": "True"}]},
    }))
    .expect("kept");
    assert_eq!(p.node, PodNode::Named("worker-1".into()));
    assert_eq!(p.deletion, Some(1_800_000_600.0));
    assert_eq!(p.deletion_grace_seconds, Some(600));
    assert_eq!(
        (p.ready, p.disruption_target),
        (Some(CondStatus::False), Some(CondStatus::True))
    );
    assert!(!p.finished);
}

#[test]
fn odd_pod_fields_read_as_unset_and_never_fail_the_pod() {
    let p = pod_of(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {MANAGED_LABEL: "true"},
            "deletionTimestamp": "yesterday", "deletionGracePeriodSeconds": "ten"},
        "spec": {"nodeName": "Not_A/Node"},
        "status": {"phase": "Running", "conditions": {"Ready": true}},
    }))
    .expect("kept");
    assert_eq!(p.node, PodNode::Invalid);
    assert_eq!((p.deletion, p.deletion_grace_seconds), (None, None));
    assert_eq!((p.ready, p.disruption_target), (None, None));
    let bare = pod_of(json!({"metadata": {"name": "p", "namespace": "ns",
        "labels": {MANAGED_LABEL: "true"}}, "spec": 7}))
    .expect("kept");
    assert_eq!(bare, PodState::new(false));
}

#[test]
fn a_node_keeps_its_ready_condition_and_three_taints() {
    let (key, n) = node_of(json!({
        "metadata": {"name": "worker-1", "labels": {"kubernetes.io/hostname": "worker-1"}},
        "spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "example.com/gpu", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "Unknown"},
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "lastTransitionTime": "2027-01-15T08:00:00Z"}],
            "images": [{"names": ["x"], "sizeBytes": 1}]},
    }));
    assert_eq!(key, ObjectKey::new("", "worker-1"));
    let n = n.expect("kept");
    assert_eq!(n.ready, Some(CondStatus::Unknown));
    assert_eq!(&*n.ready_reason, "NodeStatusUnknown");
    assert_eq!(n.ready_since, Some(1_800_000_000.0));
    assert_eq!(
        n.taints,
        Taints {
            not_ready: false,
            unreachable: true,
            out_of_service: true
        }
    );
}

#[test]
fn a_node_without_conditions_or_with_odd_ones_is_kept_without_them() {
    let (_, n) = node_of(json!({"metadata": {"name": "bare"}}));
    assert_eq!(n, Some(NodeEntry::default()));
    let (_, n) = node_of(json!({"metadata": {"name": "odd"},
        "spec": {"taints": "none"},
        "status": {"conditions": [{"type": "Ready", "status": "Maybe",
            "reason": "r".repeat(10_000), "lastTransitionTime": "not a time"}]}}));
    let n = n.expect("kept");
    assert_eq!((n.ready, n.ready_since), (None, None));
    assert_eq!(n.ready_reason.len(), crate::index::MAX_LABEL_BYTES);
    assert_eq!(n.taints, Taints::default());
    // A name no Node can have is not kept.
    assert_eq!(node_of(json!({"metadata": {"name": "Bad/Name"}})).1, None);
}
