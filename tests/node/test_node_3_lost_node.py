"""The lock a lost node leaves, decided by the real kube-controller-manager (run after test_node.py,
which registered lost-1 and lost-2 with imitated kubelets, put a runner holding a lock on each and
stopped both kubelets right after the install, and test_node_2_tls.py: their tests ran inside the
node lifecycle controller's grace and the alert's 300 s + 1m). tests/node/lost_node.py's monitor
kept the first time each thing was seen; the figures are measured from when the kubelets stopped.

1. lost-1: the controller marks it Ready Unknown and taints it unreachable; the taint eviction
   controller deletes the runner (10 s toleration), which stays Terminating (no kubelet confirms);
   the exporter's series has reason node_unreachable and the node's name within 30 s of Unknown;
   CAPTFStateLockHolderNodeLost reaches the Alertmanager webhook, one alert for two replicas.
2. The runbook's fix, its commands run by the real kubectl as printed: PodGC force-deletes the
   terminating pod, the lock turns own_stale and the series goes.
3. lost-2: its runner tolerates the taint; its kubelet comes back and posts Ready; the series goes.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from typing import Any

from conftest import REPORT, Monitoring
from lost_node import LOST, M, NS, OUT_OF_SERVICE, UNREACHABLE, Lost, Scenario, epoch, pod_condition, taints
from pykit.controlplane import ROOT, Kube
from pykit.net import WaitTimeout, wait_for
from pykit.node import Node
from pykit.realtools import Shell

RUNBOOK = ROOT / "docs" / "runbooks" / "CAPTFStateLockHolderNodeLost.md"
ALERT = "CAPTFStateLockHolderNodeLost"
RUNBOOKS = "https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks"
#: the controller-manager's default --node-monitor-grace-period (v1.36), which the stage keeps
GRACE_S = 50


def started(sc: Scenario) -> None:
    assert sc.monitor is not None and sc.stopped_at is not None, \
        "the lost-node case was not started (test_node.py's test_runners_on_two_more_nodes_... starts it)"


def seen(sc: Scenario, case: Lost, what: str, until: float, why: str) -> float:
    """Waits until the monitor has seen ``what`` for ``case`` (``until``: a wall-clock deadline);
    returns when it was first seen."""
    try:
        return wait_for(lambda: case.seen.get(what), max(5.0, until - time.time()), f"{case.node}: {why}", interval=1)
    except WaitTimeout as e:
        assert sc.monitor is not None
        raise AssertionError(f"{e}\nseen so far: {sorted(case.seen)}\nmonitor errors: {sc.monitor.errors[-5:]}\n"
                             f"kubelet errors: {case.kubelet.errors[-5:]}") from None


def since_stop(case: Lost, what: str) -> float:
    assert case.kubelet.stopped_at is not None
    return round(case.seen[what] - case.kubelet.stopped_at, 1)


def iso_epoch(s: str) -> float | None:
    """A UTC RFC 3339 time with or without a fraction (Alertmanager writes nanoseconds); None for
    another form (the figure is reported, not judged)."""
    head, _, frac = s.removesuffix("Z").partition(".")
    try:
        t = dt.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return None
    return t + (float("0." + frac[:6]) if frac[:6].isdigit() else 0.0)


def one_series(case: Lost) -> dict[str, Any]:
    """The series' label set (without the replica's pod and instance) and its value, one for both."""
    got = case.values["series"]
    sets = {tuple(sorted((k, v) for k, v in s["metric"].items() if k not in ("pod", "instance", "endpoint",
                                                                               "service", "container")))
            for s in got}
    assert len(sets) == 1, sets
    values = {float(s["value"][1]) for s in got}
    assert len(values) == 1, f"the replicas disagree on when the evidence began: {got}"
    return {"labels": dict(next(iter(sets))), "value": values.pop()}


def replicas_series(case: Lost, went: float) -> dict[str, str]:
    """The series as the replicas served it when first seen: its labels, and the condition's
    lastTransitionTime as its value on every replica that had it."""
    got = case.values["exporter_series"]
    sets = {tuple(sorted(lb.items())) for lb, _ in got}
    assert len(sets) == 1, got
    assert all(abs(v - went) <= 1 for _, v in got), (got, went)
    return dict(next(iter(sets)))


def runbook_commands(section: str) -> list[str]:
    """The commands of the runbook's ``sh`` blocks under the heading ``section``, comments off."""
    text = RUNBOOK.read_text()
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", part, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s{2,}#.*$", "", line.strip())
            if line and not line.startswith("#"):
                cmds.append(line)
    return cmds


def shell(node: Node, case: Lost) -> tuple[Shell, dict[str, str]]:
    sh = Shell.make(node.w / "runbook-shell", node.kubeconfig.read_text(), {"kubectl": node.bins["KUBECTL"]})
    return sh, {"NS": NS, "KIND": M, "NAME": case.obj, "NODE": case.node, "HOLDER_POD": case.pod}


def test_a_lost_node_is_unknown_and_tainted_and_its_runners_lock_pages_once(node: Node, monitoring: Monitoring,
                                                                           lost_nodes: Scenario) -> None:
    sc = lost_nodes
    started(sc)
    case = sc.lost
    stop = case.kubelet.stopped_at
    last_renew = case.kubelet.last_renew
    assert stop is not None and last_renew is not None
    seen(sc, case, "unknown", stop + GRACE_S + 180, "Ready Unknown by the node lifecycle controller")
    ready = case.values["unknown"]
    assert ready["reason"] == "NodeStatusUnknown", ready
    went = epoch(ready["lastTransitionTime"])
    # not before the grace: the controller waited 50 s from the last heartbeat it saw
    assert went >= last_renew + GRACE_S - 1, (ready, last_renew)
    seen(sc, case, "unreachable_taint", stop + GRACE_S + 240, "the unreachable NoExecute taint")
    (taint,) = [t for t in taints(node.kube.get_obj("nodes", None, case.node))
                if t["key"] == UNREACHABLE and t["effect"] == "NoExecute"]
    taint_at = epoch(taint["timeAdded"])
    seen(sc, case, "exporter_series", went + 60, "the node-lost series on a replica")
    # the evidence began when the controller marked the node, not when the exporter looked
    labels = replicas_series(case, went)
    want = {"namespace": NS, "kind": M, "name": case.obj, "node": case.node, "reason": "node_unreachable"}
    assert labels == want, labels
    # the monitor's first sighting is an upper bound (it samples every second, and can be held up);
    # the transition time has whole seconds
    assert case.seen["exporter_series"] - went <= 31, "the series more than 30 s after the node turned Unknown"
    # and in Prometheus (one scrape interval of the ServiceMonitor, 30 s, later at most)
    seen(sc, case, "series", went + 120, "the node-lost series in Prometheus")
    s = one_series(case)
    assert {k: s["labels"].get(k) for k in want} == want and abs(s["value"] - went) <= 1, s
    # the taint eviction controller deleted the runner after its 10 s toleration; no kubelet
    # confirms, so it stays Terminating, Running as far as the API knows
    seen(sc, case, "pod_deleting", went + 180, "the runner deleted by the taint eviction controller")
    dis = case.values["pod_deleting"]["disruption"]
    assert dis and dis["reason"] == "DeletionByTaintManager", case.values["pod_deleting"]
    evicted_at = epoch(dis["lastTransitionTime"])
    assert evicted_at >= taint_at + 10 - 1, (dis, taint)  # not before the 10 s toleration ended
    p = node.kube.get_obj("pods", NS, case.pod)
    assert p["metadata"].get("deletionTimestamp") and p["status"]["phase"] == "Running", p["status"]
    # CAPTF counts a terminating pod as alive: the class stays own_live beside the evidence
    klass = {r["metric"]["class"] for r in monitoring.query(f'captf_state_lock_info{{namespace="{NS}",name="{case.obj}"}}')}
    assert klass == {"own_live"}, klass
    # the page: 300 s of evidence, then the rule's `for: 1m`
    seen(sc, case, "alert", went + 300 + 60 + 240, f"{ALERT} at the webhook")
    paged_at = case.seen["alert"]
    assert paged_at >= went + 355, f"paged {paged_at - went:.0f} s after Unknown: before 300 s + 1m"
    hook = sc.monitor.alerts(ALERT)
    mine = [a for a in hook if a["labels"].get("name") == case.obj]
    assert len({tuple(sorted(a["labels"].items())) for a in mine}) == 1, mine
    a = mine[0]
    assert {k: a["labels"].get(k) for k in ("namespace", "kind", "name", "node", "reason", "severity")} == {
        "namespace": NS, "kind": M, "name": case.obj, "node": case.node, "reason": "node_unreachable",
        "severity": "warning"}, a["labels"]
    assert "pod" not in a["labels"] and "instance" not in a["labels"], a["labels"]
    assert a["annotations"]["runbook_url"] == f"{RUNBOOKS}/{ALERT}.md", a["annotations"]
    # the scheduler never used the imitated node: only the runner the test bound there
    bound = [x["metadata"]["name"] for x in node.kube.list("pods", None, fieldSelector=f"spec.nodeName={case.node}")["items"]]
    assert bound == [case.pod], bound
    # the times the objects carry (whole seconds), and the monitor's sightings (upper bounds)
    REPORT["lost_node"] = {
        "node_monitor_grace_period_s": GRACE_S,
        "last_heartbeat_to_kubelet_stop_s": round(stop - last_renew, 1),
        "kubelet_stop_to_unknown_transition_s": round(went - stop, 1),
        "kubelet_stop_to_unreachable_taint_added_s": round(taint_at - stop, 1),
        "kubelet_stop_to_runner_evicted_s": round(evicted_at - stop, 1),
        "unknown_transition_to_series_on_a_replica_at_most_s": round(case.seen["exporter_series"] - went, 1),
        "unknown_transition_to_series_in_prometheus_at_most_s": round(case.seen["series"] - went, 1),
        "unknown_transition_to_alert_starts_at_s": round(firing - went, 1) if (firing := iso_epoch(a["startsAt"])) else None,
        "unknown_transition_to_alert_at_webhook_at_most_s": round(paged_at - went, 1),
        "kubelet_stop_to_alert_at_webhook_at_most_s": since_stop(case, "alert"),
    }


def watch_pod(node: Node, name: str, rv: str, events: list[tuple[float, str, dict[str, Any]]],
              done: threading.Event) -> None:
    """Every change of the pod from resourceVersion ``rv`` until it is deleted (or 5 minutes)."""
    k = Kube(node.url, node.admin_token, node.ca_file)
    try:
        with k.s.get(f"{k.url}/api/v1/namespaces/{NS}/pods", stream=True, timeout=330, params={
                "watch": "true", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv,
                "timeoutSeconds": 300}) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                ev = json.loads(line)
                events.append((time.time(), ev["type"], ev["object"]))
                if ev["type"] == "DELETED":
                    break
    finally:
        k.close()
        done.set()


def test_the_runbooks_out_of_service_taint_has_podgc_remove_the_pod_and_the_lock_turns_own_stale(
        node: Node, lost_nodes: Scenario) -> None:
    sc = lost_nodes
    started(sc)
    case = sc.lost
    assert "series" in case.seen and "pod_deleting" in case.seen, "the lost node was not seen lost first"
    sh, env = shell(node, case)
    # Confirm, as the runbook says (the outside-Kubernetes half is this test's: the kubelet is gone)
    confirm = runbook_commands("Confirm")
    assert len(confirm) == 4, confirm
    outs = []
    for cmd in confirm:
        r = sh.run(cmd, env=env)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)
        outs.append(r.stdout)
    assert re.search(rf"^{case.node}\s+NotReady\s", outs[0], re.M), outs[0]
    assert outs[1].startswith("Unknown NodeStatusUnknown since "), outs[1]
    assert UNREACHABLE in outs[1], outs[1]
    assert re.search(rf"^{re.escape(case.pod)}\s.*\sTerminating\s.*\s{case.node}\s", outs[2], re.M), outs[2]
    assert outs[3].strip().endswith("DeletionByTaintManager"), outs[3]
    # the fix, exactly as printed
    fix = [c for c in runbook_commands("What to do") if OUT_OF_SERVICE in c and not c.endswith("-")]
    assert fix == ['kubectl taint node "$NODE" node.kubernetes.io/out-of-service=nodeshutdown:NoExecute'], fix
    rv = node.kube.get_obj("pods", NS, case.pod)["metadata"]["resourceVersion"]
    events: list[tuple[float, str, dict[str, Any]]] = []
    done = threading.Event()
    threading.Thread(target=watch_pod, args=(node, case.pod, rv, events, done), daemon=True).start()
    case.seen["acted"] = time.time()
    r = sh.run(fix[0], env=env)
    assert r.returncode == 0 and "tainted" in r.stdout, (r.stdout, r.stderr)
    tainted = case.seen["acted"]
    n = node.kube.get_obj("nodes", None, case.node)
    assert {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"} in \
        [{k: t.get(k) for k in ("key", "value", "effect")} for t in taints(n)], taints(n)
    # PodGC runs every 20 s: it marks the pod Failed, then deletes it with grace 0
    wait_for(done.is_set, 180, "the runner's watch ending with its deletion", interval=0.5)
    kinds = [(e[1], e[2].get("status", {}).get("phase")) for e in events]
    assert kinds and kinds[-1][0] == "DELETED", kinds
    failed = [e for e in events if e[1] == "MODIFIED" and e[2].get("status", {}).get("phase") == "Failed"]
    assert failed, f"PodGC did not mark the pod Failed before deleting it: {kinds}"
    deleted_at = events[-1][0]
    gc_log = (node.w / "kube-controller-manager.log").read_text(errors="replace")
    assert f'"PodGC is force deleting Pod" pod="{NS}/{case.pod}"' in gc_log, "no PodGC line for the runner"
    assert pod_condition(failed[-1][2], "DisruptionTarget") is not None
    seen(sc, case, "exporter_own_stale", deleted_at + 60, "the lock own_stale on both replicas")
    seen(sc, case, "exporter_series_gone", deleted_at + 60, "the node-lost series gone from both replicas")
    stale, gone = case.seen["exporter_own_stale"] - deleted_at, case.seen["exporter_series_gone"] - deleted_at
    assert stale <= 30 and gone <= 30, (stale, gone)
    seen(sc, case, "own_stale", deleted_at + 120, "the lock own_stale in Prometheus")
    seen(sc, case, "series_gone", deleted_at + 120, "the node-lost series gone from Prometheus")
    REPORT["lost_node_fix"] = {
        "taint_to_pod_failed_s": round(failed[0][0] - tainted, 1),
        "taint_to_pod_deleted_s": round(deleted_at - tainted, 1),
        "taint_to_own_stale_on_both_replicas_s": round(case.seen["exporter_own_stale"] - tainted, 1),
        "taint_to_series_gone_from_both_replicas_s": round(case.seen["exporter_series_gone"] - tainted, 1),
        "taint_to_own_stale_in_prometheus_s": round(case.seen["own_stale"] - tainted, 1),
        "taint_to_series_gone_in_prometheus_s": round(case.seen["series_gone"] - tainted, 1),
        "pod_events": kinds,
    }


def test_the_node_ready_again_clears_the_series(node: Node, monitoring: Monitoring, lost_nodes: Scenario) -> None:
    sc = lost_nodes
    started(sc)
    case = sc.back
    stop = case.kubelet.stopped_at
    assert stop is not None
    seen(sc, case, "unknown", stop + GRACE_S + 180, "Ready Unknown by the node lifecycle controller")
    went = epoch(case.values["unknown"]["lastTransitionTime"])
    seen(sc, case, "exporter_series", went + 60, "the node-lost series on a replica")
    labels = replicas_series(case, went)
    assert labels["node"] == case.node and labels["reason"] == "node_unreachable", labels
    assert case.seen["exporter_series"] - went <= 31, "the series more than 30 s after the node turned Unknown"
    seen(sc, case, "series", went + 120, "the node-lost series in Prometheus")
    # its runner tolerates the unreachable taint for an hour: still there, not terminating
    p = node.kube.get_obj("pods", NS, case.pod)
    assert not p["metadata"].get("deletionTimestamp"), p["metadata"]
    assert monitoring.query(f'{LOST}{{namespace="{NS}",name="{case.obj}"}}'), "the series went before the node came back"
    case.seen["acted"] = time.time()
    back = case.kubelet.resume()
    case.kubelet.post_pod_running(NS, case.pod)
    seen(sc, case, "exporter_series_gone", back + 60, "the series gone from both replicas, the node Ready again")
    assert case.seen["exporter_series_gone"] - back <= 30, case.seen["exporter_series_gone"] - back
    seen(sc, case, "series_gone", back + 120, "the series gone from Prometheus")
    seen(sc, case, "unreachable_taint_removed", back + 120, "the controller taking the unreachable taint off")
    klass = {r["metric"]["class"] for r in monitoring.query(f'captf_state_lock_info{{namespace="{NS}",name="{case.obj}"}}')}
    assert klass == {"own_live"}, klass
    assert node.kube.get(f"/api/v1/namespaces/{NS}/pods/{case.pod}").status_code == 200
    REPORT["lost_node_back"] = {
        "kubelet_stop_to_unknown_transition_s": round(went - stop, 1),
        "unknown_transition_to_series_on_a_replica_at_most_s": round(case.seen["exporter_series"] - went, 1),
        "unknown_transition_to_series_in_prometheus_at_most_s": round(case.seen["series"] - went, 1),
        "ready_posted_to_series_gone_from_both_replicas_at_most_s": round(case.seen["exporter_series_gone"] - back, 1),
        "ready_posted_to_series_gone_in_prometheus_at_most_s": round(case.seen["series_gone"] - back, 1),
        "ready_posted_to_unreachable_taint_removed_at_most_s": round(case.seen["unreachable_taint_removed"] - back, 1),
        "lost_for_s": round(back - went, 1),
    }
