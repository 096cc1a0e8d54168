"""The lost-node evidence (issue 49, docs/contract.md 3.1) on a real API server: Nodes written
through nodes/status as the node lifecycle controller writes them (no controller runs here: the
node stage has the real one), a runner pod bound to one by spec.nodeName, and the series
captf_state_lock_holder_node_lost_timestamp_seconds following the Node; and a namespaced install
without any Node access (the chart's watchNamespaces mode) that still reports a runner pod
terminating past its grace, from the pod alone."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Callable

from conftest import NAMESPACED_RESOURCES, REPORT, audit_summary, install_chart
from pykit.builders import lock_lease, now_utc, pod, runner_pod_name, terraform_object
from pykit.controlplane import ControlPlane, Kube
from pykit.exporter import PRESENT, E, Exporter, wait_samples

M = "TerraformMachine"
LOST = "captf_state_lock_holder_node_lost_timestamp_seconds"
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def set_ready(kube: Kube, name: str, status: str, reason: str) -> float:
    """Writes the Ready condition as the node lifecycle controller does; returns its
    lastTransitionTime (whole seconds, as the API serializes it)."""
    t = now_utc().replace(microsecond=0)
    stamp = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"type": "Ready", "status": status, "reason": reason, "message": "set by the test",
            "lastTransitionTime": stamp, "lastHeartbeatTime": stamp}
    kube.patch("nodes", None, name, {"status": {"conditions": [cond]}}, sub="status")
    return t.timestamp()


def runner_on(kube: Kube, ns: str, owner: str, node_name: str) -> str:
    """An own runner pod of (M, ns, owner) bound to ``node_name``, holding the object's lock."""
    kube.create(terraform_object(M, ns, owner))
    p = runner_pod_name(M, owner)
    body = pod(ns, p, "Running", kind=M, owner=owner)
    body["spec"]["nodeName"] = node_name
    kube.create(body)
    kube.create(lock_lease(ns, M, owner, who=f"root@{p}"))
    return p


def test_the_series_follows_the_node(cp: ControlPlane, kube: Kube, ns: str, install,
                                     start_exporter: Callable[..., Exporter]) -> None:
    since = time.time() - 1
    exp = start_exporter()  # the chart's ClusterRole: nodes watched, watch_up 1 for every resource
    worker = f"{ns}-worker"[:63]
    kube.create(node(worker))
    set_ready(kube, worker, "True", "KubeletReady")
    p = runner_on(kube, ns, "web", worker)
    live = E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web", **{"class": "own_live"})
    wait_samples(exp, [live, E(LOST, None, namespace=ns, name="web")], 30, "own_live on a Ready node")

    # The kubelet stops reporting: Ready Unknown and the unreachable taint.
    t0 = time.monotonic()
    went = set_ready(kube, worker, "Unknown", "NodeStatusUnknown")
    kube.patch("nodes", None, worker, {"spec": {"taints": [UNREACHABLE]}})
    m = wait_samples(exp, [E(LOST, went, namespace=ns, kind=M, name="web", node=worker,
                             reason="node_unreachable"), live], 30, "the lost node within 30 s")
    REPORT["lost_node_series_after_s"] = round(time.monotonic() - t0, 1)
    assert m.get("captf_state_locks_held", **{"class": "own_live"}) >= 1, "the class stays CAPTF's"

    # Ready again (the taint still there for a moment): the series goes.
    set_ready(kube, worker, "True", "KubeletReady")
    wait_samples(exp, [E(LOST, None, namespace=ns, name="web"), live], 30, "the node is back")

    # The Node deleted: node_deleted, since the exporter saw it go.
    before = time.time()
    kube.delete("nodes", None, worker)
    m = wait_samples(exp, [E(LOST, PRESENT, namespace=ns, name="web", node=worker, reason="node_deleted")],
                     30, "the Node deleted")
    value = m.get(LOST, namespace=ns, name="web")
    assert value is not None and before - 1 <= value <= time.time() + 1, value

    # The pod gone (PodGC would delete it; here the test does): own_stale, no evidence.
    kube.delete("pods", ns, p, grace_period=0)
    wait_samples(exp, [E("captf_state_lock_info", 1, namespace=ns, name="web", **{"class": "own_stale"}),
                       E(LOST, None, namespace=ns, name="web")], 30, "the pod gone")
    exp.stop()
    s = audit_summary(cp, install.user, since)
    assert set(s["by_verb"]) <= {"get", "list", "watch"}, s["by_verb"]
    nodes = [r for r in cp.requests_of(install.user, since) if (r.get("objectRef") or {}).get("resource") == "nodes"]
    assert nodes and {r["verb"] for r in nodes} <= {"list", "watch"}, [(r["verb"], r["requestURI"]) for r in nodes]


def test_a_namespaced_install_sees_a_pod_terminating_past_its_grace(
        cp: ControlPlane, kube: Kube, namespace_factory, start_exporter: Callable[..., Exporter]) -> None:
    ns = namespace_factory("lost-ns")
    inst = install_chart(kube, {"watchNamespaces": [ns], "fullnameOverride": "lock-exporter-lost"}, name="lostns")
    assert not any(o["kind"] == "ClusterRole" and any("nodes" in r.get("resources", []) for r in o["rules"])
                   for o in inst.objects), "a namespaced install has no right on nodes"
    since = time.time() - 1
    exp = start_exporter(token=inst.token, extra_args=("--namespaces", ns, "--skip-resources", "nodes"),
                         resources=NAMESPACED_RESOURCES)
    # No Node of that name, and none read: only the pod can say anything.
    p = runner_on(kube, ns, "web", "worker-gone")
    live = E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web", **{"class": "own_live"})
    wait_samples(exp, [live], 30, "own_live")
    # The taint manager's eviction, shortened: deleted with a 1 s grace. No kubelet confirms it, so
    # it stays terminating; its deletionTimestamp is the end of the grace.
    kube.delete("pods", ns, p, grace_period=1)
    ends = kube.get_obj("pods", ns, p)["metadata"]["deletionTimestamp"]
    t0 = time.monotonic()
    m = wait_samples(exp, [E(LOST, PRESENT, namespace=ns, kind=M, name="web", node="worker-gone",
                             reason="pod_terminating_past_grace"), live], 120,
                     "terminating past its grace (60 s allowance)")
    REPORT["lost_node_past_grace_after_s"] = round(time.monotonic() - t0, 1)
    assert time.monotonic() - t0 >= 55, "not before the grace plus the skew allowance"
    value = m.get(LOST, namespace=ns, name="web")
    want = dt.datetime.strptime(ends, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    assert value is not None and abs(value - want) < 1, (value, ends)
    assert m.all("captf_lock_exporter_watch_up", resource="nodes") == [], "no Node watch, and it says so"
    exp.stop()
    reqs = cp.requests_of(inst.user, since)
    assert not [r for r in reqs if (r.get("objectRef") or {}).get("resource") == "nodes"], "never asked for nodes"
    assert {r["verb"] for r in reqs} <= {"get", "list", "watch"}, {r["verb"] for r in reqs}
