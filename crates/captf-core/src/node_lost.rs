//! Whether the node of an own runner pod that holds a lock is lost, and
//! since when: evidence beside CAPTF's class, never a change of it.
//!
//! On a lost node no kubelet confirms the runner's death. The pod stays
//! `Running`, then (once the node's `unreachable`/`not-ready` taint outlives
//! its toleration) it is deleted and stays terminating for as long as the
//! Node object exists. CAPTF counts a terminating pod as alive, so the lock
//! stays `own_live` and no Job force-unlocks it. This module says which of
//! four closed reasons holds ([`LostReason`]) from what the pod and its
//! Node say, as plain data: no clock (`now` is a parameter), no I/O.
//!
//! The rules, in order (the first that holds decides):
//!
//! 1. A pod with no usable `spec.nodeName` has no node to be lost: none.
//! 2. Node evidence, when the Node watch has synced ([`NodeSight`]):
//!    - no Node of that name: `node_deleted`, since the exporter saw it go
//!      (or first found it missing). A name never seen counts too: a pod
//!      bound to a node that does not exist has no kubelet either.
//!    - `Ready` is `True`: none. The node is back (or never left), its
//!      kubelet confirms the pod's end; a taint still present lags the
//!      condition by a few seconds and does not count.
//!    - `Ready` is `Unknown`, or the `unreachable` taint is set:
//!      `node_unreachable` (the kubelet stopped reporting).
//!    - `Ready` is `False`, or the `not-ready` taint is set: `node_not_ready`.
//!    - otherwise (a Node with no `Ready` condition and neither taint):
//!      rule 3.
//! 3. Pod evidence alone (no node watch: a namespaced install, or nodes
//!    refused): the pod is terminating and its `deletionTimestamp` (the end
//!    of its grace period: the API server sets it to the deletion request
//!    plus the grace) lies more than [`MAX_CLOCK_SKEW_SECONDS`] in the past:
//!    `pod_terminating_past_grace`, since the `deletionTimestamp`. A
//!    kubelet that is alive confirms a kill within seconds of the grace.
//!
//! The `since` of a node reason is the `Ready` condition's
//! `lastTransitionTime`, but never later than when this exporter first saw
//! the node in that state: a time from a clock that runs ahead (the
//! kubelet's own, for `False`) cannot push the start into the future, and
//! an unparseable or missing time falls back to the sighting.
//!
//! The pod's own `Ready` and `DisruptionTarget` conditions are shown beside
//! the verdict (the on-call report) but decide nothing: the node lifecycle
//! controller writes them from the same node state the Node shows, and
//! `DisruptionTarget` is also set by drains and preemption, where the
//! kubelet is alive.

/// How far ahead of this exporter's clock the API server's may run before
/// a pod is called past its grace: a `deletionTimestamp` counts as past
/// only this long after it, so a skewed clock cannot call a pod in its
/// grace period lost.
pub const MAX_CLOCK_SKEW_SECONDS: f64 = 60.0;

/// Why the node of a lock's holder pod is lost: a closed set (the `reason`
/// label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LostReason {
    /// The Node's `Ready` condition is `False` (or it has the `not-ready`
    /// taint): the kubelet reports, but the node does not run pods.
    NodeNotReady,
    /// `Ready` is `Unknown` (or the `unreachable` taint): the kubelet
    /// stopped reporting.
    NodeUnreachable,
    /// No Node of the pod's `nodeName` exists.
    NodeDeleted,
    /// The pod is terminating past its grace period and no kubelet
    /// confirmed its end (pod evidence alone).
    PodTerminatingPastGrace,
}

impl LostReason {
    /// Every reason, in label order.
    pub const ALL: [LostReason; 4] = [
        LostReason::NodeNotReady,
        LostReason::NodeUnreachable,
        LostReason::NodeDeleted,
        LostReason::PodTerminatingPastGrace,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::NodeNotReady => "node_not_ready",
            LostReason::NodeUnreachable => "node_unreachable",
            LostReason::NodeDeleted => "node_deleted",
            LostReason::PodTerminatingPastGrace => "pod_terminating_past_grace",
        }
    }
}

/// A condition's `status`; any other string reads as absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl CondStatus {
    /// `True`, `False` or `Unknown`; None for anything else.
    pub fn parse(s: &str) -> Option<CondStatus> {
        match s {
            "True" => Some(CondStatus::True),
            "False" => Some(CondStatus::False),
            "Unknown" => Some(CondStatus::Unknown),
            _ => None,
        }
    }

    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }
}

/// The taint a Node gets when its `Ready` condition is `False`.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint a Node gets when its `Ready` condition is `Unknown`.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint an operator sets on a node confirmed shut down (non-graceful
/// node shutdown): PodGC then force-deletes its terminating pods.
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// The three taints kept of a Node (any effect).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taints {
    /// `node.kubernetes.io/not-ready`.
    pub not_ready: bool,
    /// `node.kubernetes.io/unreachable`.
    pub unreachable: bool,
    /// `node.kubernetes.io/out-of-service`.
    pub out_of_service: bool,
}

impl Taints {
    /// Notes a taint by key; other keys are not kept.
    pub fn note(&mut self, key: &str) {
        match key {
            TAINT_NOT_READY => self.not_ready = true,
            TAINT_UNREACHABLE => self.unreachable = true,
            TAINT_OUT_OF_SERVICE => self.out_of_service = true,
            _ => {}
        }
    }

    /// The keys set, in a fixed order.
    pub fn keys(self) -> impl Iterator<Item = &'static str> {
        [
            (self.not_ready, TAINT_NOT_READY),
            (self.unreachable, TAINT_UNREACHABLE),
            (self.out_of_service, TAINT_OUT_OF_SERVICE),
        ]
        .into_iter()
        .filter_map(|(set, key)| set.then_some(key))
    }
}

/// What the runner pod says.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodSigns<'a> {
    /// `spec.nodeName` when it is a DNS-1123 subdomain (a name a Node can
    /// have); None when unset or not such a name.
    pub node_name: Option<&'a str>,
    /// `metadata.deletionTimestamp` as Unix seconds (the end of the grace
    /// period); None when not terminating, or unparseable.
    pub deletion: Option<f64>,
    /// `metadata.deletionGracePeriodSeconds` (shown, not judged).
    pub deletion_grace_seconds: Option<i64>,
    /// The pod's `Ready` condition (shown, not judged).
    pub ready: Option<CondStatus>,
    /// The pod's `DisruptionTarget` condition (shown, not judged).
    pub disruption_target: Option<CondStatus>,
}

/// What a Node says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeSigns {
    /// The `Ready` condition's status; None when the Node has none.
    pub ready: Option<CondStatus>,
    /// Its `lastTransitionTime` as Unix seconds; None when missing or
    /// unparseable.
    pub ready_since: Option<f64>,
    /// When this exporter first saw the Node with its current `Ready`
    /// status and taints (Unix seconds).
    pub observed_since: f64,
    /// The kept taints.
    pub taints: Taints,
}

/// What is known of the pod's Node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NodeSight<'a> {
    /// Nothing: Nodes are not watched (a namespaced install, skipped),
    /// refused, or not synced yet. Pod evidence alone decides.
    NotWatched,
    /// The Node watch has synced and has no Node of that name; `since`
    /// is when the exporter saw it deleted, or first found it missing.
    Absent {
        /// Unix seconds.
        since: f64,
    },
    /// The Node.
    Present(&'a NodeSigns),
}

/// The reason the pod's node is lost and since when (Unix seconds), or
/// None (see the module documentation for the rules).
pub fn node_lost(pod: &PodSigns<'_>, node: NodeSight<'_>, now: f64) -> Option<(LostReason, f64)> {
    pod.node_name?;
    match node {
        NodeSight::Absent { since } => return Some((LostReason::NodeDeleted, since)),
        NodeSight::Present(n) => {
            let since = || match n.ready_since {
                Some(t) if t.is_finite() => t.min(n.observed_since),
                _ => n.observed_since,
            };
            match n.ready {
                Some(CondStatus::True) => return None,
                Some(CondStatus::Unknown) => return Some((LostReason::NodeUnreachable, since())),
                _ if n.taints.unreachable => {
                    return Some((LostReason::NodeUnreachable, n.observed_since))
                }
                Some(CondStatus::False) => return Some((LostReason::NodeNotReady, since())),
                None if n.taints.not_ready => {
                    return Some((LostReason::NodeNotReady, n.observed_since))
                }
                None => {}
            }
        }
        NodeSight::NotWatched => {}
    }
    let deletion = pod.deletion.filter(|t| t.is_finite())?;
    (now > deletion + MAX_CLOCK_SKEW_SECONDS)
        .then_some((LostReason::PodTerminatingPastGrace, deletion))
}

/// When [`node_lost`] may next change with the clock alone: the moment a
/// terminating pod's grace (plus the skew allowance) ends, when that is
/// still ahead of `now`. None when the clock alone changes nothing.
pub fn grace_ends(pod: &PodSigns<'_>, now: f64) -> Option<f64> {
    pod.node_name?;
    let end = pod.deletion.filter(|t| t.is_finite())? + MAX_CLOCK_SKEW_SECONDS;
    (end >= now).then_some(end)
}

#[cfg(test)]
mod tests;
