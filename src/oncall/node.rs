//! The holder pod's node in a lock's report: where the runner runs, the
//! Node's `Ready` condition and taints, the pod's deletion, the lost-node
//! evidence (docs/contract.md 3.1), and the runbook's fix for a lost node
//! with the node's name filled in: the confirmation first, the
//! out-of-service taint only after it.
//!
//! Sans-IO: built from [`LockFacts`]; every value from the cluster is shown
//! escaped and every command argument quoted ([`shq`]).

use std::fmt::Write as _;

use crate::core::node_lost::{CondStatus, TAINT_OUT_OF_SERVICE};
use crate::core::shown::shown;
use crate::index::LockFacts;

use super::model::NodeReport;
use super::render::at;
use super::shell::{show, shq};

/// The out-of-service taint as `kubectl taint` takes it.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute";

/// The node part of a lock's report; None when the cache shows the holder
/// pod bound to no node (or the holder is no own runner pod).
pub fn report(f: &LockFacts) -> Option<NodeReport> {
    let n = f.node.as_ref()?;
    let pod = f.pod.as_ref().and_then(|p| p.cached.as_ref());
    let node = n.node.as_ref().map(|v| &v.entry);
    let status = |s: Option<CondStatus>| s.map(CondStatus::as_str);
    Some(NodeReport {
        name: shown(&n.name).into_owned(),
        watched: n.watched,
        exists: n.watched.then_some(n.node.is_some()),
        ready: status(node.and_then(|e| e.ready)),
        ready_reason: node.map_or(String::new(), |e| shown(&e.ready_reason).into_owned()),
        ready_since: node.and_then(|e| e.ready_since).map(at),
        taints: node.map_or(Vec::new(), |e| e.taints.keys().collect()),
        pod_deletion: pod.and_then(|p| p.deletion).map(at),
        pod_grace_seconds: pod.and_then(|p| p.deletion_grace_seconds),
        pod_ready: status(pod.and_then(|p| p.ready)),
        pod_disruption_target: status(pod.and_then(|p| p.disruption_target)),
        lost_reason: n.lost.as_ref().map(|l| l.reason.as_str()),
        lost_since: n.lost.as_ref().map(|l| at(l.since)),
        lost_since_seconds: n.lost.as_ref().map(|l| l.since),
    })
}

impl NodeReport {
    /// The Node's state in one line.
    pub fn node_line(&self) -> String {
        let state = match (self.exists, self.ready) {
            (None, _) => "not seen: this install does not read Nodes (namespaced, or RBAC); judged on the pod alone".to_string(),
            (Some(false), _) => "no such Node: deleted, or never existed".to_string(),
            (Some(true), None) => "exists, no Ready condition".to_string(),
            (Some(true), Some(r)) => format!(
                "Ready={r}{}{}",
                if self.ready_reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", self.ready_reason)
                },
                self.ready_since
                    .as_deref()
                    .map_or(String::new(), |s| format!(" since {s}"))
            ),
        };
        let taints = match self.taints.as_slice() {
            [] => String::new(),
            t => format!("; taints {}", t.join(", ")),
        };
        format!("{state}{taints}")
    }

    /// The pod's deletion and conditions in one line.
    pub fn pod_line(&self) -> String {
        let deletion = match (&self.pod_deletion, self.pod_grace_seconds) {
            (Some(t), Some(g)) => format!("terminating: grace of {g} s ends at {t}"),
            (Some(t), None) => format!("terminating: grace ends at {t}"),
            (None, _) => "not terminating".to_string(),
        };
        let cond = |name: &str, v: Option<&str>| v.map(|v| format!(", {name}={v}"));
        format!(
            "{deletion}{}{}",
            cond("Ready", self.pod_ready).unwrap_or_default(),
            cond("DisruptionTarget", self.pod_disruption_target).unwrap_or_default()
        )
    }

    /// The lost-node verdict in one line, `now` Unix seconds.
    pub fn lost_line(&self, now: f64) -> String {
        match (self.lost_reason, &self.lost_since, self.lost_since_seconds) {
            (Some(r), Some(s), Some(t)) => format!(
                "LOST ({r}) since {s} ({} ago): no kubelet confirms the runner's end, so CAPTF counts the pod alive and never force-unlocks",
                super::render::human_duration((now - t).max(0.0))
            ),
            _ => "not lost".to_string(),
        }
    }
}

/// The runbook's fix for a lost node (docs/runbooks/CAPTFStateLockHolderNodeLost.md),
/// the node's name filled in; nothing when the node is not lost.
pub fn fix_text(n: &NodeReport, out: &mut String) {
    let Some(reason) = n.lost_reason else {
        return;
    };
    let node = shq(&n.name);
    let _ = writeln!(
        out,
        "  Its node {} is lost ({reason}). Nothing will release this lock until the pod is gone.\n  1. Confirm the machine is down or fenced, outside Kubernetes (cloud or hardware console:\n     stopped, powered off, or cut off; it cannot come back while you work):\n       kubectl get node {node} -o wide\n  2. Only then, take the pod off the dead node (non-graceful node shutdown):\n       kubectl taint node {node} {OUT_OF_SERVICE}\n     or delete the dead Node:\n       kubectl delete node {node}\n     The pod is removed (Failed), the lock turns own_stale, and CAPTF's next Job\n     force-unlocks it.\n  3. When the machine is back and repaired:\n       kubectl taint node {node} {TAINT_OUT_OF_SERVICE}-\n  Never force-unlock, or force-delete the pod, while the node may still run it.",
        show(&n.name)
    );
}
