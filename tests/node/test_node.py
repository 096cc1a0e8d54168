"""The product the way users run it (issue 42): a kubelet runs the chart's pods, `helm install` puts
them there, and the Prometheus Operator turns the chart's ServiceMonitor and PrometheusRule into a
Prometheus that scrapes them and an Alertmanager that delivers the pages.

The tests share one cluster and one release and run in file order: install, scrape, alerts,
rollout, sidecar, the token the kubelet projected, upgrade and uninstall.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from conftest import REPORT, Monitoring
from pykit.builders import force_unlock_event, job_name, lock_lease, now_utc, terraform_object
from pykit.controlplane import ROOT, audit_time
from pykit.net import wait_for
from pykit.node import NODE_NAME, Node

RELEASE = "captf-lock-exporter"
NS = "captf-system"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=captf-lock-exporter"
RUNBOOKS = "https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks"
M = "TerraformMachine"
#: the labels of CAPTF's manager pods (config/manager), which the component's Service selects
MANAGER_LABELS = {"control-plane": "controller-manager", "app.kubernetes.io/name": "cluster-api-provider-terraform",
                  "cluster.x-k8s.io/provider": "infrastructure-terraform"}

#: what the tests learn and hand on (the release's pods, its rendered manifest)
STATE: dict[str, Any] = {}


def values(images: dict[str, str], **extra: Any) -> dict[str, Any]:
    """The chart's defaults, but for what a Prometheus Operator user sets: the local image, the
    ServiceMonitor, PrometheusRule and dashboards switched on, and Prometheus' ServiceAccount
    bound to the metrics reader (without it every scrape is refused, as values.yaml says)."""
    repo, tag = images["exporter"].rsplit(":", 1)
    v = {"image": {"repository": repo, "tag": tag},
         "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True},
         "metricsReader": {"serviceAccounts": [{"name": "prometheus", "namespace": "monitoring"}]}}
    v.update(extra)
    return v


def write_values(node: Node, name: str, v: dict[str, Any]) -> Path:
    p = node.w / f"{name}.yaml"
    p.write_text(yaml.safe_dump(v))
    return p


def ready_pods(node: Node) -> list[dict[str, Any]]:
    return [p for p in node.pods(NS, SELECTOR) if Node.is_ready(p)]


def exporter_targets(mon: Monitoring, job: str = "captf-lock-exporter") -> list[dict[str, Any]]:
    return [t for t in mon.api("/api/v1/targets?state=active")["activeTargets"] if t["labels"].get("job") == job]


def test_node_ready_and_operator_runs_prometheus_and_alertmanager(node: Node, monitoring: Monitoring) -> None:
    assert node.node_ready()
    (op,) = node.pods("monitoring", "app.kubernetes.io/name=prometheus-operator")
    assert Node.is_ready(op) and op["spec"]["nodeName"] == NODE_NAME, op.get("status")
    for name in ("prometheus-main-0", "alertmanager-main-0"):
        pod = node.pod("monitoring", name)
        assert Node.is_ready(pod) and pod["spec"]["nodeName"] == NODE_NAME, (name, pod.get("status"))
        owner = pod["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "StatefulSet", owner  # made by the operator, run by the kubelet
        states = [c["state"] for c in pod["status"]["containerStatuses"]]
        assert all("running" in s for s in states), states


def test_helm_install_both_replicas_ready_by_the_kubelets_probes(node: Node, images: dict[str, str],
                                                                 monitoring: Monitoring) -> None:
    vals = write_values(node, "values", values(images))
    t0 = time.monotonic()
    STATE["install_wall"] = time.time()
    node.helm("install", RELEASE, str(ROOT / "chart"), "--namespace", NS, "--create-namespace", "-f", str(vals),
              "--wait", "--timeout", "5m")
    REPORT["helm_install_wait_s"] = round(time.monotonic() - t0, 1)
    dep = node.kube.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}").json()
    assert dep["status"].get("readyReplicas") == 2, dep["status"]
    pods = ready_pods(node)
    assert len(pods) == 2, [p["metadata"]["name"] for p in node.pods(NS, SELECTOR)]
    for p in pods:
        (c,) = p["spec"]["containers"]
        assert c.get("readinessProbe") and c.get("livenessProbe"), c
        assert p["spec"]["nodeName"] == NODE_NAME
    STATE["pods"] = {p["metadata"]["name"] for p in pods}
    kinds = {
        f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets": "PodDisruptionBudget",
        f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies": "NetworkPolicy",
        f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors": "ServiceMonitor",
        f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/prometheusrules": "PrometheusRule",
    }
    for path, kind in kinds.items():
        items = node.kube.get(path, params={"labelSelector": f"app.kubernetes.io/instance={RELEASE}"}).json()["items"]
        assert len(items) == 1, (kind, items)
    cms = node.kube.get(f"/api/v1/namespaces/{NS}/configmaps", params={"labelSelector": "grafana_dashboard=1"}).json()
    assert cms["items"], "no dashboards ConfigMap"
    STATE["manifest"] = node.helm("get", "manifest", RELEASE, "-n", NS).stdout

    def up_once() -> bool:
        return any(float(r["value"][1]) == 1 for r in monitoring.query('up{job="captf-lock-exporter"}'))
    wait_for(up_once, 180, "Prometheus' first up 1 for the exporter", interval=0.5)
    REPORT["helm_install_to_first_up_1_s"] = round(time.monotonic() - t0, 1)


def test_operator_prometheus_scrapes_both_replicas_over_https_and_loads_the_rules(node: Node,
                                                                                  monitoring: Monitoring) -> None:
    def both_up() -> list[dict[str, Any]]:
        ts = exporter_targets(monitoring)
        return ts if len(ts) == 2 and all(t["health"] == "up" for t in ts) else []
    targets = wait_for(both_up, 120, "both replicas up in /api/v1/targets", interval=1)
    pod_ips = {node.pod_ip(NS, n) for n in STATE["pods"]}
    assert {t["labels"]["pod"] for t in targets} == STATE["pods"]
    for t in targets:
        assert t["scrapeUrl"].startswith("https://"), t["scrapeUrl"]
        assert t["discoveredLabels"].get("__meta_kubernetes_pod_ip", t["scrapeUrl"].split("//")[1].split(":")[0]) in pod_ips
    # the scrape needed Prometheus' own token: the same endpoint without one answers 401
    import requests
    r = requests.get(targets[0]["scrapeUrl"], verify=False, timeout=10)
    assert r.status_code == 401, r.status_code
    want = set()
    for f in (ROOT / "alerts").glob("*.rules.yaml"):
        for g in yaml.safe_load(f.read_text())["groups"]:
            want |= {r["alert"] for r in g["rules"] if "alert" in r}

    def loaded() -> set[str]:
        got = {r["name"] for g in monitoring.api("/api/v1/rules")["groups"] for r in g["rules"] if r["type"] == "alerting"}
        return got if want <= got else set()
    wait_for(loaded, 120, f"the chart's rules {sorted(want)} in /api/v1/rules", interval=1)
    durs = monitoring.query('scrape_duration_seconds{job="captf-lock-exporter"}')
    REPORT["prometheus_scrape_duration_seconds"] = {r["metric"]["pod"]: round(float(r["value"][1]), 4) for r in durs}


def test_foreign_overdue_and_force_unlock_each_page_once(node: Node, monitoring: Monitoring) -> None:
    kube = node.kube
    ns = kube.namespace("tenant-a")
    kube.create(terraform_object(M, ns, "web-m", jobs={"lockTimeoutSeconds": 3}))
    kube.create(terraform_object(M, ns, "db-m"))
    kube.create(lock_lease(ns, M, "web-m", who="alice@laptop", created=now_utc() - dt.timedelta(minutes=5)))
    # the counter must be scraped at 0 before the Event: increase() needs the step from 0 to 1
    wait_for(lambda: monitoring.query(f'captf_state_lock_force_unlocks_total{{namespace="{ns}",name="db-m"}} == 0'),
             90, "db-m's force-unlock counter scraped at 0", interval=1)
    kube.create(force_unlock_event(ns, M, "db-m", job_name("m", "db-m")))
    hook = monitoring.webhook

    def paged(alert: str, name: str) -> list[dict[str, Any]]:
        return [a for a in hook.alerts(alert) if a["labels"].get("name") == name]
    fu = wait_for(lambda: paged("CAPTFForceUnlocks", "db-m"), 120, "CAPTFForceUnlocks at the webhook", interval=1)
    fo = wait_for(lambda: paged("CAPTFStateLockForeignOverdue", "web-m"), 180,
                  "CAPTFStateLockForeignOverdue at the webhook", interval=1)
    for alerts, name, page in ((fu, "db-m", "CAPTFForceUnlocks"), (fo, "web-m", "CAPTFStateLockForeignOverdue")):
        a = alerts[0]
        assert a["labels"]["namespace"] == ns and a["labels"]["kind"] == M and a["labels"]["name"] == name, a
        assert a["labels"]["severity"] == "warning", a
        assert a["annotations"]["runbook_url"] == f"{RUNBOOKS}/{page}.md", a
        assert "pod" not in a["labels"] and "instance" not in a["labels"], a["labels"]
        # one page for two replicas: every notification of it carries the same one alert
        assert len({tuple(sorted(x["labels"].items())) for x in alerts}) == 1, alerts
    assert fo[0]["labels"]["class"] == "foreign" and fo[0]["labels"]["holder"] == "alice@laptop", fo[0]["labels"]


def test_rollout_restart_under_the_pdb_keeps_a_replica_ready(node: Node, monitoring: Monitoring) -> None:
    low = {"ready": 2, "samples": 0, "down_alerts": []}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            n = len(ready_pods(node))
            low["ready"] = min(low["ready"], n)
            low["samples"] += 1
            if low["samples"] % 8 == 0:
                low["down_alerts"] += monitoring.query('ALERTS{alertname="CAPTFLockExporterDown"}')
            stop.wait(0.25)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    before = {p["metadata"]["uid"] for p in node.pods(NS, SELECTOR)}
    t0 = time.monotonic()
    try:
        node.kubectl("-n", NS, "rollout", "restart", f"deployment/{RELEASE}")
        node.kubectl("-n", NS, "rollout", "status", f"deployment/{RELEASE}", "--timeout=300s")
        wait_for(lambda: len(ready_pods(node)) == 2 and not before & {p["metadata"]["uid"] for p in ready_pods(node)},
                 120, "two new replicas Ready", interval=0.5)
    finally:
        stop.set()
        t.join(10)
    REPORT["rollout_restart_s"] = round(time.monotonic() - t0, 1)
    assert low["samples"] > 10, low
    assert low["ready"] >= 1, f"a moment with no Ready replica during the rollout: {low}"
    assert not low["down_alerts"] and not monitoring.query('ALERTS{alertname="CAPTFLockExporterDown"}'), low
    # the PDB itself (maxUnavailable 1): a second eviction while the first replacement is not Ready is refused
    def pdb_allows_one() -> bool:
        (pdb,) = node.kube.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets").json()["items"]
        st = pdb.get("status", {})
        return st.get("currentHealthy") == 2 and st.get("disruptionsAllowed") == 1
    wait_for(pdb_allows_one, 60, "the PDB counting two healthy replicas, one disruption allowed", interval=0.5)
    pods = sorted(p["metadata"]["name"] for p in ready_pods(node))
    codes = []
    for name in pods:
        r = node.kube.request("POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction", ok=(200, 201, 429),
                              json={"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": name, "namespace": NS}})
        codes.append(r.status_code)
    assert codes == [201, 429], codes
    wait_for(lambda: len(ready_pods(node)) == 2, 180, "two replicas Ready again after the eviction", interval=0.5)
    STATE["pods"] = {p["metadata"]["name"] for p in ready_pods(node)}


def test_kustomize_sidecar_starts_is_ready_and_is_scraped(node: Node, images: dict[str, str],
                                                          monitoring: Monitoring) -> None:
    overlay = node.w / "sidecar-overlay"
    overlay.mkdir()
    repo, tag = images["exporter"].rsplit(":", 1)
    # a stand-in for CAPTF's manager: its Deployment and ServiceAccount names, a container `manager`
    manager = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "captf-controller-manager", "namespace": NS}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "captf-controller-manager", "namespace": NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": MANAGER_LABELS},
                  "template": {"metadata": {"labels": MANAGER_LABELS},
                               "spec": {"serviceAccountName": "captf-controller-manager",
                                        "containers": [{"name": "manager", "image": images["pause"],
                                                        "imagePullPolicy": "IfNotPresent"}]}}}},
    ]
    (overlay / "manager.yaml").write_text(yaml.safe_dump_all(manager))
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["manager.yaml"],
        # relative (kustomize refuses an absolute root); directories may lie outside the overlay
        "components": [os.path.relpath(ROOT / "deploy" / "kustomize", overlay),
                       os.path.relpath(ROOT / "deploy" / "kustomize" / "servicemonitor", overlay)],
        "images": [{"name": "ghcr.io/captf-io/captf-lock-exporter", "newName": repo, "newTag": tag}],
    }))
    node.kubectl("apply", "-k", str(overlay))
    node.kubectl("create", "clusterrolebinding", "sidecar-metrics-prometheus",
                 "--clusterrole=captf-lock-exporter-sidecar-metrics-reader", "--serviceaccount=monitoring:prometheus")
    node.kubectl("-n", NS, "rollout", "status", "deployment/captf-controller-manager", "--timeout=180s")

    def sidecar_ready() -> dict[str, Any] | None:
        for p in node.pods(NS, ",".join(f"{k}={v}" for k, v in MANAGER_LABELS.items())):
            st = {c["name"]: c for c in p.get("status", {}).get("containerStatuses", [])}
            if "lock-exporter" in st and st["lock-exporter"]["ready"] and "running" in st["lock-exporter"]["state"]:
                return p
        return None
    pod = wait_for(sidecar_ready, 120, "the lock-exporter sidecar started and Ready", interval=0.5)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["manager", "lock-exporter"]

    def scraped() -> list[dict[str, Any]]:
        ts = [t for t in monitoring.api("/api/v1/targets?state=active")["activeTargets"]
              if t["labels"].get("pod") == pod["metadata"]["name"]]
        return ts if ts and all(t["health"] == "up" for t in ts) else []
    wait_for(scraped, 120, "the sidecar's target up", interval=1)
    node.kubectl("delete", "-k", str(overlay), "--wait=true")
    node.kubectl("delete", "clusterrolebinding", "sidecar-metrics-prometheus")


def test_the_exporter_uses_the_token_the_kubelet_projected(node: Node) -> None:
    user = f"system:serviceaccount:{NS}:{RELEASE}"
    since = STATE["install_wall"]
    evs = [e for e in node.audit_events() if e.get("user", {}).get("username") == user
           and audit_time(e["requestReceivedTimestamp"]) >= since]
    assert evs, f"no request of {user} in the audit log"
    pods_seen = set()
    for e in evs:
        extra = e["user"].get("extra", {})
        # a bound (projected) token names the pod it was issued for; a TokenRequest for the
        # ServiceAccount alone, or a legacy Secret token, does not
        assert extra.get("authentication.kubernetes.io/pod-name"), e
        assert extra.get("authentication.kubernetes.io/credential-id", [""])[0].startswith("JTI="), e
        pods_seen |= set(extra["authentication.kubernetes.io/pod-name"])
    all_pods = {p["metadata"]["name"] for p in node.pods(NS, SELECTOR)} | STATE["pods"]
    assert pods_seen & all_pods, (pods_seen, all_pods)


def test_helm_upgrade_rolls_and_uninstall_leaves_nothing(node: Node, images: dict[str, str]) -> None:
    before = {p["metadata"]["uid"] for p in node.pods(NS, SELECTOR)}
    vals = write_values(node, "values-debug", values(images, logLevel="debug"))
    node.helm("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", NS, "-f", str(vals), "--wait", "--timeout", "5m")
    wait_for(lambda: len(ready_pods(node)) == 2 and not before & {p["metadata"]["uid"] for p in ready_pods(node)},
             180, "two new replicas after the upgrade", interval=0.5)
    for p in ready_pods(node):
        args = p["spec"]["containers"][0].get("args", [])
        assert "--log-level=debug" in args, args
    manifest = STATE["manifest"]
    objs = [o for o in yaml.safe_load_all(manifest) if o]
    assert any(o["kind"] == "ClusterRole" for o in objs) and any(o["kind"] == "ClusterRoleBinding" for o in objs)
    node.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "5m")

    def gone() -> list[str]:
        left = []
        for o in objs:
            ns = o["metadata"].get("namespace")
            args = ["get", o["kind"], o["metadata"]["name"], "--ignore-not-found", "-o", "name"]
            if ns:
                args += ["-n", ns]
            if node.kubectl(*args).stdout.strip():
                left.append(f"{o['kind']}/{o['metadata']['name']}")
        return left
    wait_for(lambda: not gone(), 120, "every object of the release deleted", interval=1)
    # nothing else labelled with the release either, namespaced or cluster-scoped: the pods (which
    # helm does not wait for) end within their grace period
    kinds = node.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()

    def labelled() -> list[str]:
        r = node.kubectl("get", ",".join(kinds), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
                         check=False)
        if r.returncode != 0:
            raise AssertionError(f"kubectl get of every kind failed: {r.stderr[-2000:]}")
        return r.stdout.split()
    wait_for(lambda: not labelled(), 120, "nothing labelled with the release left", interval=1)
    assert not node.pods(NS, SELECTOR)
