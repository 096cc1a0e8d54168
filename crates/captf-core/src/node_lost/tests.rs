//! The evidence rules as a table: synthetic pods and Nodes, one row each.

use super::*;

const NOW: f64 = 1_800_000_000.0;

fn pod(node: Option<&str>, deletion: Option<f64>) -> PodSigns<'_> {
    PodSigns {
        node_name: node,
        deletion,
        ..PodSigns::default()
    }
}

fn node(ready: Option<CondStatus>, since: Option<f64>, observed: f64, taints: Taints) -> NodeSigns {
    NodeSigns {
        ready,
        ready_since: since,
        observed_since: observed,
        taints,
    }
}

const UNREACHABLE: Taints = Taints {
    not_ready: false,
    unreachable: true,
    out_of_service: false,
};
const NOT_READY: Taints = Taints {
    not_ready: true,
    unreachable: false,
    out_of_service: false,
};
const NONE: Taints = Taints {
    not_ready: false,
    unreachable: false,
    out_of_service: false,
};

/// What, the pod, its Node, the verdict.
type Row<'a> = (
    &'a str,
    PodSigns<'a>,
    NodeSight<'a>,
    Option<(LostReason, f64)>,
);

use CondStatus::{False, True, Unknown};
use LostReason::*;

#[test]
fn the_rules_as_a_table() {
    let t0 = NOW - 600.0;
    let ready = node(Some(True), Some(t0), t0, NONE);
    let unknown = node(Some(Unknown), Some(t0), NOW - 10.0, UNREACHABLE);
    let not_ready = node(Some(False), Some(t0), NOW - 10.0, NOT_READY);
    let no_conditions = node(None, None, t0, NONE);
    let taint_only = node(None, None, NOW - 5.0, UNREACHABLE);
    let not_ready_taint_only = node(None, None, NOW - 7.0, NOT_READY);
    // Ready True while the unreachable taint lingers for a moment.
    let back = node(Some(True), Some(NOW - 1.0), NOW - 1.0, UNREACHABLE);
    // The kubelet's clock runs an hour ahead: its transition lies ahead.
    let skewed = node(Some(False), Some(NOW + 3600.0), NOW - 20.0, NONE);
    // An unparseable lastTransitionTime arrives as None.
    let unparsed = node(Some(Unknown), None, NOW - 30.0, NONE);
    let nan = node(Some(Unknown), Some(f64::NAN), NOW - 30.0, NONE);
    let fenced = node(
        Some(Unknown),
        Some(t0),
        t0,
        Taints {
            out_of_service: true,
            ..UNREACHABLE
        },
    );
    let past = Some(NOW - 61.0);
    let within_skew = Some(NOW - 59.0);
    let future = Some(NOW + 300.0);
    let absent = NodeSight::Absent { since: NOW - 42.0 };
    let w = NodeSight::NotWatched;
    let p = NodeSight::Present;
    #[rustfmt::skip]
    let rows: Vec<Row<'_>> = vec![
        ("healthy node, running pod", pod(Some("n1"), None), p(&ready), None),
        ("unreachable: since the transition", pod(Some("n1"), None), p(&unknown), Some((NodeUnreachable, t0))),
        ("not ready: since the transition", pod(Some("n1"), None), p(&not_ready), Some((NodeNotReady, t0))),
        ("unreachable wins over the pod's grace", pod(Some("n1"), past), p(&unknown), Some((NodeUnreachable, t0))),
        ("fenced node: still lost until the pod goes", pod(Some("n1"), past), p(&fenced), Some((NodeUnreachable, t0))),
        ("taint without a condition", pod(Some("n1"), None), p(&taint_only), Some((NodeUnreachable, NOW - 5.0))),
        ("not-ready taint without a condition", pod(Some("n1"), None), p(&not_ready_taint_only), Some((NodeNotReady, NOW - 7.0))),
        ("a node that returns: Ready wins over a lagging taint", pod(Some("n1"), past), p(&back), None),
        ("clock skew: a future transition counts from the sighting", pod(Some("n1"), None), p(&skewed), Some((NodeNotReady, NOW - 20.0))),
        ("unparseable time: from the sighting", pod(Some("n1"), None), p(&unparsed), Some((NodeUnreachable, NOW - 30.0))),
        ("not a number: from the sighting", pod(Some("n1"), None), p(&nan), Some((NodeUnreachable, NOW - 30.0))),
        ("node deleted", pod(Some("n1"), None), absent, Some((NodeDeleted, NOW - 42.0))),
        ("a node that never existed", pod(Some("ghost"), None), absent, Some((NodeDeleted, NOW - 42.0))),
        ("no conditions, no taints: the pod decides", pod(Some("n1"), past), p(&no_conditions), Some((PodTerminatingPastGrace, NOW - 61.0))),
        ("no conditions, in grace", pod(Some("n1"), within_skew), p(&no_conditions), None),
        ("no node watch, running pod", pod(Some("n1"), None), w, None),
        ("no node watch, past grace", pod(Some("n1"), past), w, Some((PodTerminatingPastGrace, NOW - 61.0))),
        ("no node watch, past grace by less than the skew allowance", pod(Some("n1"), within_skew), w, None),
        ("no node watch, grace ahead", pod(Some("n1"), future), w, None),
        ("no node watch, deletion not a number", pod(Some("n1"), Some(f64::NAN)), w, None),
        ("unscheduled pod, past grace", pod(None, past), w, None),
        ("unscheduled pod, node absent", pod(None, None), absent, None),
    ];
    for (what, p, n, want) in rows {
        assert_eq!(node_lost(&p, n, NOW), want, "{what}");
    }
}

#[test]
fn the_pods_own_conditions_decide_nothing() {
    let signs = PodSigns {
        node_name: Some("n1"),
        deletion: None,
        deletion_grace_seconds: Some(600),
        ready: Some(False),
        disruption_target: Some(True),
    };
    assert_eq!(node_lost(&signs, NodeSight::NotWatched, NOW), None);
    let ready = node(Some(True), Some(NOW), NOW, NONE);
    assert_eq!(node_lost(&signs, NodeSight::Present(&ready), NOW), None);
}

#[test]
fn the_grace_deadline_is_the_deletion_plus_the_skew_allowance() {
    let p = pod(Some("n1"), Some(NOW + 10.0));
    assert_eq!(
        grace_ends(&p, NOW),
        Some(NOW + 10.0 + MAX_CLOCK_SKEW_SECONDS)
    );
    // At the deadline the verdict has not turned yet; just after it has.
    let end = NOW + 10.0 + MAX_CLOCK_SKEW_SECONDS;
    assert_eq!(node_lost(&p, NodeSight::NotWatched, end), None);
    assert!(node_lost(&p, NodeSight::NotWatched, end + 0.001).is_some());
    // Past already, not terminating, or no node: nothing to wait for.
    assert_eq!(grace_ends(&pod(Some("n1"), Some(NOW - 61.0)), NOW), None);
    assert_eq!(grace_ends(&pod(Some("n1"), None), NOW), None);
    assert_eq!(grace_ends(&pod(None, Some(NOW)), NOW), None);
}

#[test]
fn labels_and_statuses() {
    let labels: Vec<&str> = LostReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        [
            "node_not_ready",
            "node_unreachable",
            "node_deleted",
            "pod_terminating_past_grace"
        ]
    );
    for s in [True, False, Unknown] {
        assert_eq!(CondStatus::parse(s.as_str()), Some(s));
    }
    assert_eq!(CondStatus::parse("true"), None);
    let mut t = Taints::default();
    for k in [TAINT_OUT_OF_SERVICE, "example.com/other", TAINT_UNREACHABLE] {
        t.note(k);
    }
    assert_eq!(
        t.keys().collect::<Vec<_>>(),
        [TAINT_UNREACHABLE, TAINT_OUT_OF_SERVICE]
    );
}
