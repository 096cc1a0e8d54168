"""The product the way users run it (issues 42 and 50): a kubelet runs the chart's pods, `helm install`
puts them there under a release name of the user's, with only the values chart/README.md tells users
to set, and the Prometheus Operator, configured as kube-prometheus-stack configures it (selection by
its `release` label), turns the chart's ServiceMonitor and PrometheusRule into a Prometheus that
scrapes them over TLS it verifies and an Alertmanager that delivers the pages. kube-router's network
policy controller enforces the chart's NetworkPolicy.

The tests share one cluster and one release and run in file order: install, runners on two
imitated nodes whose kubelets then stop (test_node_3_lost_node.py checks what followed), scrape (verified),
the policy (ingress, egress), alerts, rollout, an impostor, a certificate rotation, sidecar, the
token the kubelet projected, the lost nodes' page, fix and return, the down alert with both replicas gone, cert-manager's mode under a
second release with fullnameOverride, upgrade and uninstall.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from typing import Any

import yaml

from addons import connect_from_pod, pause_pod
from conftest import KPS_RELEASE, PROMETHEUS_SA, REPORT, Monitoring, Webhook
from lost_node import LOST, Monitor, Replicas, Scenario
from lost_node import NS as LOST_NS
from release import (FULLNAME, NS, RELEASE, SELECTOR, SERVER_NAME, STATE, exporter_targets, ready_pods, scrape_job,
                     tls_secret, values, write_values)
from pykit.builders import force_unlock_event, job_name, lock_lease, now_utc, terraform_object
from pykit.controlplane import ROOT, audit_time
from pykit.net import wait_for
from pykit.node import NODE_NAME, Node
from pykit.tls import served_fingerprint

RUNBOOKS = "https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks"
M = "TerraformMachine"
#: the labels of CAPTF's manager pods (config/manager), which the component's Service selects
MANAGER_LABELS = {"control-plane": "controller-manager", "app.kubernetes.io/name": "cluster-api-provider-terraform",
                  "cluster.x-k8s.io/provider": "infrastructure-terraform"}


def test_node_ready_and_operator_runs_prometheus_and_alertmanager(node: Node, lost_nodes: Scenario,
                                                                  monitoring: Monitoring) -> None:
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
    vals = write_values(node, "values", values(node, images))
    t0 = time.monotonic()
    STATE["install_wall"] = time.time()
    node.helm("install", RELEASE, str(ROOT / "chart"), "--namespace", NS, "--create-namespace", "-f", str(vals),
              "--wait", "--timeout", "5m")
    REPORT["helm_install_wait_s"] = round(time.monotonic() - t0, 1)
    dep = node.kube.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{FULLNAME}").json()
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
        return any(float(r["value"][1]) == 1 for r in monitoring.query(f'up{{job="captf-lock-exporter",namespace="{NS}"}}'))
    wait_for(up_once, 180, "Prometheus' first up 1 for the exporter", interval=0.5)
    REPORT["helm_install_to_first_up_1_s"] = round(time.monotonic() - t0, 1)


def test_runners_on_two_more_nodes_hold_locks_then_their_kubelets_stop(node: Node, monitoring: Monitoring,
                                                                      lost_nodes: Scenario) -> None:
    """The start of the lost-node case (checked in test_node_3_lost_node.py, after the tests between
    have run inside the controller's grace and the alert's 300 s + 1m): an own runner pod on each
    imitated node holds its object's lock; the exporter calls both own_live with no node-lost
    series; then both kubelets stop."""
    sc = lost_nodes
    node.kube.namespace(LOST_NS)
    for case in sc.cases:
        case.start(node.kube)

    def both_own_live() -> bool:
        for case in sc.cases:
            got = monitoring.query(f'captf_state_lock_info{{namespace="{LOST_NS}",name="{case.obj}"}}')
            if not got or {r["metric"].get("class") for r in got} != {"own_live"}:
                return False
        return True
    wait_for(both_own_live, 120, "both runners' locks own_live in Prometheus", interval=1)
    # a held lock on a Ready node has no evidence: the series is absent (it can be: see the checks later)
    assert not monitoring.query(f'{LOST}{{namespace="{LOST_NS}"}}'), monitoring.query(f'{LOST}{{namespace="{LOST_NS}"}}')
    # the replicas read directly (the monitor's figures for the exporter itself): the same, on both
    def replica_ips() -> list[str]:
        # the Deployment's pods only: the impostor of test_node_2_tls.py has the same labels and
        # must never receive a request
        return [p["status"]["podIP"] for p in ready_pods(node)
                if any(o["kind"] == "ReplicaSet" for o in p["metadata"].get("ownerReferences", []))]
    ca = node.w / "release-ca.crt"  # the CA the rotation keeps (test_node_2_tls.py checks it does)
    ca.write_bytes(tls_secret(node)["ca.crt"])
    replicas = Replicas(replica_ips, node.kube.token("monitoring", PROMETHEUS_SA), ca, SERVER_NAME)
    scraped = replicas.scrape()
    assert len(scraped) == 2, len(scraped)
    for samples in scraped:
        mine = {(lb["name"], lb["class"]) for (n, lb, v) in samples
                if n == "captf_state_lock_info" and lb.get("namespace") == LOST_NS}
        assert mine == {(c.obj, "own_live") for c in sc.cases}, mine
        assert not [x for x in samples if x[0] == LOST and x[1].get("namespace") == LOST_NS], samples
    for case in sc.cases:
        bound = [p["metadata"]["name"] for p in node.kube.list("pods", None, fieldSelector=f"spec.nodeName={case.node}")["items"]]
        assert bound == [case.pod], f"pods on the imitated node {case.node}: {bound}"
        case.kubelet.stop()
    sc.stopped_at = time.time()
    sc.monitor = Monitor(node, monitoring.query, monitoring.webhook.alerts, replicas, sc.cases).start()


def test_operator_prometheus_scrapes_both_replicas_over_verified_https_and_loads_the_rules(
        node: Node, monitoring: Monitoring) -> None:
    # kube-prometheus-stack's selection: the release label the README tells users to set
    (sm,) = node.kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors").json()["items"]
    assert sm["metadata"]["labels"].get("release") == KPS_RELEASE, sm["metadata"]["labels"]
    tls = sm["spec"]["endpoints"][0]["tlsConfig"]
    assert tls == {"ca": {"secret": {"name": f"{FULLNAME}-tls", "key": "ca.crt"}}, "serverName": SERVER_NAME}, tls
    # what the operator made of it: Prometheus checks the chain against the release's CA and the name
    job = wait_for(lambda: scrape_job(monitoring, NS, FULLNAME), 60, "the ServiceMonitor's job in the config", interval=1)
    tc = job.get("tls_config", {})
    assert tc.get("server_name") == SERVER_NAME and tc.get("ca_file") and not tc.get("insecure_skip_verify"), tc

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
    REPORT["scrape_tls_config"] = {k: v for k, v in tc.items() if k != "ca_file"} | {"ca": "from Secret"}
    want = set()
    for f in (ROOT / "alerts").glob("*.rules.yaml"):
        for g in yaml.safe_load(f.read_text())["groups"]:
            want |= {r["alert"] for r in g["rules"] if "alert" in r}

    def loaded() -> set[str]:
        got = {r["name"] for g in monitoring.api("/api/v1/rules")["groups"] for r in g["rules"] if r["type"] == "alerting"}
        return got if want <= got else set()
    wait_for(loaded, 120, f"the chart's rules {sorted(want)} in /api/v1/rules", interval=1)
    durs = monitoring.query(f'scrape_duration_seconds{{job="captf-lock-exporter",namespace="{NS}"}}')
    REPORT["prometheus_scrape_duration_seconds"] = {r["metric"]["pod"]: round(float(r["value"][1]), 4) for r in durs}


def test_network_policy_enforced_admits_monitoring_only(node: Node, images: dict[str, str],
                                                      monitoring: Monitoring) -> None:
    """kube-router enforces the chart's policy: a pod in a namespace it does not admit cannot open a
    connection to the metrics port, the same pod in `monitoring` can, and so can the node (the
    kubelet's probes, which the Ready pods already passed)."""
    assert node.kube_router.policy_chains(), "kube-router wrote no policy chain for the release's NetworkPolicy"
    node.kubectl("create", "namespace", "intruders")
    node.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pause_pod("intruders", "intruder", images["pause"]),
                                                              pause_pod("monitoring", "admitted", images["pause"])]))
    wait_for(lambda: node.pod_ready("intruders", "intruder") and node.pod_ready("monitoring", "admitted"), 120,
             "the two probe pods Ready", interval=0.5)
    target = sorted(ready_pods(node), key=lambda p: p["metadata"]["name"])[0]
    ip = target["status"]["podIP"]
    intruder, admitted = node.pod("intruders", "intruder"), node.pod("monitoring", "admitted")
    got = {"intruders": connect_from_pod(node, intruder, ip, 9820),
           "monitoring": connect_from_pod(node, admitted, ip, 9820)}
    REPORT["network_policy_connect_to_metrics_port"] = got
    assert got["monitoring"].startswith("connected"), got
    assert not got["intruders"].startswith("connected"), got
    # the node itself (where the kubelet probes from) still reaches the port
    assert served_fingerprint(9820, host=ip)
    node.kubectl("delete", "namespace", "intruders", "--wait=false")
    node.kubectl("-n", "monitoring", "delete", "pod", "admitted", "--wait=false")


def test_exporter_egress_reaches_the_api_server_and_nothing_else(node: Node, monitoring: Monitoring,
                                                                 webhook: Webhook) -> None:
    """Egress as the chart renders it with the README's setting for an API server on another port:
    from an exporter pod the API server's address (after the `kubernetes` Service's translation)
    answers, a port the policy does not name on the same host does not, though a pod without a
    policy reaches it."""
    pod = ready_pods(node)[0]
    webhook_port = int(webhook.url.rsplit(":", 1)[1].split("/")[0])
    got = {"api_server": connect_from_pod(node, pod, node.ip, node.port),
           "other_port_same_host": connect_from_pod(node, pod, node.ip, webhook_port)}
    prom = node.pod("monitoring", "prometheus-main-0")
    got["other_port_from_unpolicied_pod"] = connect_from_pod(node, prom, node.ip, webhook_port)
    REPORT["network_policy_exporter_egress"] = got
    assert got["api_server"].startswith("connected"), got
    assert not got["other_port_same_host"].startswith("connected"), got
    assert got["other_port_from_unpolicied_pod"].startswith("connected"), got
    # and the watches it needs are up through that egress
    up = monitoring.query(f'min(captf_lock_exporter_watch_up{{namespace="{NS}"}})')
    assert up and float(up[0]["value"][1]) == 1, up


def test_foreign_overdue_and_force_unlock_each_page_once(node: Node, monitoring: Monitoring) -> None:
    kube = node.kube
    ns = kube.namespace("tenant-a")
    kube.create(terraform_object(M, ns, "web-m", jobs={"lockTimeoutSeconds": 3}))
    kube.create(terraform_object(M, ns, "db-m"))
    kube.create(lock_lease(ns, M, "web-m", who="alice@laptop", created=now_utc() - dt.timedelta(minutes=5)))
    # The chart's default exposition: db-m, idle, has no series before its force-unlock, so the
    # alert must page on the counter's first appearance (the last force-unlock's time), not on a
    # step from 0 (docs/decisions/series-that-say-something.md).
    wait_for(lambda: monitoring.query(f'captf_state_lock_held{{namespace="{ns}",name="web-m"}} == 1'),
             90, "web-m's held lock scraped", interval=1)
    assert not monitoring.query(f'captf_state_lock_force_unlocks_total{{namespace="{ns}",name="db-m"}}'), \
        "an idle object has no force-unlock series"
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
        node.kubectl("-n", NS, "rollout", "restart", f"deployment/{FULLNAME}")
        node.kubectl("-n", NS, "rollout", "status", f"deployment/{FULLNAME}", "--timeout=300s")
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
        # kube-prometheus-stack selects ServiceMonitors by its release label
        "patches": [{"target": {"kind": "ServiceMonitor"},
                     "patch": yaml.safe_dump([{"op": "add", "path": "/metadata/labels/release", "value": KPS_RELEASE}])}],
    }))
    node.kubectl("apply", "-k", str(overlay))
    node.kubectl("create", "clusterrolebinding", "sidecar-metrics-prometheus",
                 "--clusterrole=captf-lock-exporter-sidecar-metrics-reader",
                 f"--serviceaccount=monitoring:{PROMETHEUS_SA}")
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
    user = f"system:serviceaccount:{NS}:{FULLNAME}"
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
