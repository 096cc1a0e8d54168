"""The node stage: the chart as users run it, on a one-node cluster with a kubelet (tests/pykit/node.py),
installed by ``helm install`` and scraped by the Prometheus a Prometheus Operator runs.

Session fixtures, built once and shared by the tests of test_node.py (which run in file order):
  node         the cluster, Ready, with kube-router's network policy controller enforcing
               NetworkPolicies (tests/node/addons.py)
  images       every image imported into the node's containerd
  monitoring   the operator (a pod), its CRDs, a Prometheus and an Alertmanager CR as pods, and a
               webhook receiver on the host behind that Alertmanager; the Prometheus selects
               ServiceMonitors and PrometheusRules by the label `release: kube-prometheus-stack`
               and scrapes as ServiceAccount kube-prometheus-stack-prometheus, as a
               kube-prometheus-stack release of that name does
  cert_manager cert-manager's CRDs and controller (started on first use)
  lost_nodes   two more Nodes, lost-1 and lost-2, whose kubelets the test imitates (registration,
               status, heartbeat Leases: tests/node/lost_node.py), registered before the release
               is installed; test_node.py stops their heartbeats right after the install, so the
               real node lifecycle controller's 50 s grace and the alert's 300 s + 1m run while
               the other tests do, and test_node_3_lost_node.py checks what followed
Needs root (the kubelet, containerd, iptables, ipset). Figures go to target/node-report.json.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from pykit.controlplane import ROOT
from pykit.net import wait_for
from pykit.node import Node, node_binaries
from pykit.node_images import exporter_image, static_image

from addons import CertManager, KubeRouter
from lost_node import ImitatedKubelet, Lost, Scenario

OPERATOR_VERSION = "v0.85.0"
#: kube-prometheus-stack installed as release "kube-prometheus-stack": its Prometheus selects
#: ServiceMonitors and rules by this label, and runs as this ServiceAccount
KPS_RELEASE = "kube-prometheus-stack"
PROMETHEUS_SA = "kube-prometheus-stack-prometheus"
REPORT: dict[str, Any] = {}
APP_VERSION = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())["appVersion"]


def prom3_binaries() -> dict[str, Path]:
    import subprocess
    out = subprocess.run(["bash", str(ROOT / "tools" / "prometheus3" / "build.sh"), "--env"], check=True,
                         capture_output=True, text=True).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("PROM3_"))
    return {k: Path(v) for k, v in env.items()}


def version_of(path: Path) -> str:
    """'prometheus-3.16.0' -> 'v3.16.0'."""
    return "v" + path.name.rsplit("-", 1)[1].lstrip("v")


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.fail("the node stage needs root (kubelet, containerd, iptables)")
    bins = node_binaries()
    # short: the kubelet's and containerd's socket paths must fit in sun_path
    work = Path(tempfile.mkdtemp(prefix="captf-node-", dir="/var/tmp"))
    n = Node(work, bins)
    try:
        n.start()
    except BaseException:
        print(n.diagnostics())
        n.stop()
        raise
    n.kube.apply_crds([ROOT / "tests" / "crds" / "terraform.yaml", ROOT / "tests" / "crds" / "capi-cluster.yaml"])
    t0 = time.monotonic()
    router = KubeRouter(n)
    try:
        router.start()
    except BaseException:
        print(n.diagnostics())
        router.stop()
        n.stop()
        raise
    n.kube_router = router  # type: ignore[attr-defined]
    REPORT["kube_router_ready_s"] = round(time.monotonic() - t0, 1)
    REPORT.update({k: round(v, 1) for k, v in n.timings.items()})
    yield n
    router.stop()
    n.stop()
    (ROOT / "target").mkdir(exist_ok=True)
    (ROOT / "target" / "node-report.json").write_text(json.dumps(REPORT, indent=1))
    print("\nnode stage figures:", json.dumps(REPORT, indent=1))


@pytest.fixture(scope="session")
def images(node: Node) -> dict[str, str]:
    t0 = time.monotonic()
    p3 = prom3_binaries()
    w = node.w / "images"
    w.mkdir()
    built = {
        "pause": static_image(w, node.bins["PAUSE"], "pause", "v1", entry="/pause"),
        "operator": static_image(w, node.bins["OPERATOR"], "prometheus-operator", OPERATOR_VERSION,
                                 entry="/bin/operator"),
        "reloader": static_image(w, node.bins["CONFIG_RELOADER"], "prometheus-config-reloader", OPERATOR_VERSION,
                                 entry="/bin/prometheus-config-reloader"),
        "prometheus": static_image(w, p3["PROM3_PROMETHEUS"], "prometheus", version_of(p3["PROM3_PROMETHEUS"]),
                                   entry="/bin/prometheus", dirs=("tmp", "prometheus"), workdir_in_image="/prometheus"),
        "alertmanager": static_image(w, p3["PROM3_ALERTMANAGER"], "alertmanager",
                                     version_of(p3["PROM3_ALERTMANAGER"]), entry="/bin/alertmanager",
                                     dirs=("tmp", "alertmanager"), workdir_in_image="/alertmanager"),
        "exporter": exporter_image(w, APP_VERSION),
        "impostor": static_image(w, node.bins["IMPOSTOR"], "impostor", "v1", entry="/impostor"),
    }
    for ref, archive in built.values():
        node.import_image(archive)
    have = node.ctr("images", "ls", "-q").stdout.split()
    missing = [ref for ref, _ in built.values() if ref not in have and f"docker.io/{ref}" not in have]
    assert not missing, f"not in containerd after import: {missing}; have {have}"
    REPORT["images_built_and_imported_s"] = round(time.monotonic() - t0, 1)
    return {k: ref for k, (ref, _) in built.items()}


class Webhook:
    """Alertmanager's webhook receiver on the node's address: every notification it was sent."""

    def __init__(self, host: str):
        self.posts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unparsed": body.decode(errors="replace")}
                with hook.lock:
                    hook.posts.append(doc)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), H)
        self.url = f"http://{host}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """Every alert named ``name`` in the notifications so far (one per notification it was in)."""
        with self.lock:
            return [a for p in self.posts for a in p.get("alerts", []) if a.get("labels", {}).get("alertname") == name]

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="session")
def webhook(node: Node) -> Iterator[Webhook]:
    h = Webhook(node.ip)
    yield h
    h.close()


def operator_module_dir() -> Path:
    """Where the Go module the operator was built from lies (its example manifests and CRDs)."""
    import subprocess
    d = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus-operator/prometheus-operator"],
                       cwd=ROOT / "tools" / "node" / "operator", check=True, capture_output=True, text=True).stdout.strip()
    return Path(d)


def operator_manifests(images: dict[str, str]) -> list[dict[str, Any]]:
    """The operator's own example RBAC and Deployment (from the module the binary was built from),
    in namespace monitoring, with the local images."""
    d = operator_module_dir()
    objs = []
    for f in sorted((d / "example" / "rbac" / "prometheus-operator").glob("*.yaml")):
        if "service-monitor" in f.name:
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc:
                continue
            if doc["metadata"].get("namespace"):
                doc["metadata"]["namespace"] = "monitoring"
            for s in doc.get("subjects", []):
                s["namespace"] = "monitoring"
            if doc["kind"] == "Deployment":
                c = doc["spec"]["template"]["spec"]["containers"][0]
                c["image"] = images["operator"]
                c["imagePullPolicy"] = "IfNotPresent"
                c["args"] = [f"--prometheus-config-reloader={images['reloader']}", "--log-level=info"]
            objs.append(doc)
    return objs


def crd_dir() -> Path:
    d = operator_module_dir()
    return d / "example" / "prometheus-operator-crd"


def monitoring_stack(images: dict[str, str], hook_url: str) -> list[dict[str, Any]]:
    """Prometheus and Alertmanager CRs as kube-prometheus-stack writes them (ServiceMonitors and
    rules selected by its release label, in every namespace; scrape and evaluate every 5 s so the
    test waits seconds, not minutes), their ServiceAccount and RBAC."""
    prom_v = images["prometheus"].rsplit(":", 1)[1]
    am_v = images["alertmanager"].rsplit(":", 1)[1]
    sec = {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True, "fsGroup": 65534}
    am_config = {
        "route": {"receiver": "hook", "group_by": ["alertname", "namespace", "kind", "name"],
                  "group_wait": "1s", "group_interval": "5s", "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [{"url": hook_url, "send_resolved": False}]}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": PROMETHEUS_SA, "namespace": "monitoring"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "node-prometheus"},
         "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "node-prometheus"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-prometheus"},
         "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS_SA, "namespace": "monitoring"}]},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alertmanager-config", "namespace": "monitoring"},
         "stringData": {"alertmanager.yaml": yaml.safe_dump(am_config)}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager", "metadata": {"name": "main", "namespace": "monitoring"},
         "spec": {"image": images["alertmanager"], "version": am_v, "replicas": 1, "configSecret": "alertmanager-config",
                  "securityContext": sec}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus", "metadata": {"name": "main", "namespace": "monitoring"},
         "spec": {"image": images["prometheus"], "version": prom_v, "replicas": 1, "serviceAccountName": PROMETHEUS_SA,
                  "serviceMonitorSelector": {"matchLabels": {"release": KPS_RELEASE}},
                  "serviceMonitorNamespaceSelector": {},
                  "podMonitorSelector": {"matchLabels": {"release": KPS_RELEASE}}, "podMonitorNamespaceSelector": {},
                  "ruleSelector": {"matchLabels": {"release": KPS_RELEASE}}, "ruleNamespaceSelector": {},
                  "scrapeInterval": "5s", "evaluationInterval": "5s", "securityContext": sec,
                  "alerting": {"alertmanagers": [{"namespace": "monitoring", "name": "alertmanager-operated",
                                                  "port": "web"}]}}},
    ]


class Monitoring:
    def __init__(self, node: Node, webhook: Webhook):
        self.node = node
        self.webhook = webhook
        self._url: str | None = None

    def prometheus_url(self) -> str:
        """The Prometheus pod's address, read once: the StatefulSet's pod is never replaced here."""
        if self._url is None:
            self._url = f"http://{self.node.pod_ip('monitoring', 'prometheus-main-0')}:9090"
        return self._url

    def query(self, q: str) -> list[dict[str, Any]]:
        import requests
        r = requests.get(self.prometheus_url() + "/api/v1/query", params={"query": q}, timeout=10)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def scrape_config(self) -> dict[str, Any]:
        """The Prometheus configuration the operator generated (Secret prometheus-main, gzipped)."""
        import base64
        import gzip
        sec = self.node.kube.get("/api/v1/namespaces/monitoring/secrets/prometheus-main").json()
        return yaml.safe_load(gzip.decompress(base64.b64decode(sec["data"]["prometheus.yaml.gz"])))

    def api(self, path: str) -> dict[str, Any]:
        import requests
        r = requests.get(self.prometheus_url() + path, timeout=10)
        r.raise_for_status()
        return r.json()["data"]


@pytest.fixture(scope="session")
def monitoring(node: Node, images: dict[str, str], webhook: Webhook) -> Monitoring:
    t0 = time.monotonic()
    node.kubectl("create", "namespace", "monitoring")
    node.kubectl("apply", "--server-side", "-f", str(crd_dir()))
    for crd in ("prometheuses", "alertmanagers", "servicemonitors", "prometheusrules", "alertmanagerconfigs"):
        node.kubectl("wait", "--for=condition=Established", f"crd/{crd}.monitoring.coreos.com", "--timeout=60s")
    node.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(operator_manifests(images)))
    node.kubectl("-n", "monitoring", "rollout", "status", "deployment/prometheus-operator", "--timeout=180s")
    REPORT["operator_ready_s"] = round(time.monotonic() - t0, 1)
    node.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(monitoring_stack(images, webhook.url)))
    wait_for(lambda: node.pod_ready("monitoring", "prometheus-main-0") and node.pod_ready("monitoring", "alertmanager-main-0"),
             300, "the operator's Prometheus and Alertmanager pods Ready", interval=1)
    REPORT["prometheus_and_alertmanager_ready_s"] = round(time.monotonic() - t0, 1)
    return Monitoring(node, webhook)


@pytest.fixture(scope="session")
def cert_manager(node: Node) -> Iterator[CertManager]:
    """cert-manager's CRDs from its module and its controller on the host, started on first use."""
    t0 = time.monotonic()
    cm = CertManager(node)
    cm.install_crds()
    cm.start()
    REPORT["cert_manager_started_s"] = round(time.monotonic() - t0, 1)
    yield cm


@pytest.fixture(scope="session")
def lost_nodes(node: Node) -> Iterator[Scenario]:
    """lost-1 (its runner tolerates the unreachable taint 10 s: evicted, then terminating for good)
    and lost-2 (its runner tolerates it an hour: still running when the node comes back), each
    Ready with a kubelet's heartbeats from now on. Their addresses are from TEST-NET-2 (this
    machine's are TEST-NET-1): nothing answers there, and nothing in the stage tries."""
    t0 = time.monotonic()
    kubelets = [ImitatedKubelet(node, "lost-1", "198.51.100.11"), ImitatedKubelet(node, "lost-2", "198.51.100.12")]
    sc = Scenario(node, Lost(kubelets[0], "runner-on-lost-1", 10), Lost(kubelets[1], "runner-on-lost-2", 3600))
    try:
        for k in kubelets:
            k.register()
            k.start()
        for k in kubelets:
            # the node lifecycle controller took the node in: Ready, and none of the taints it sets
            # on a node that is not
            def taken_in(name: str = k.name) -> bool:
                n = node.kube.get_obj("nodes", None, name)
                ready = [c for c in n["status"].get("conditions", []) if c["type"] == "Ready"]
                keys = {t["key"] for t in n["spec"].get("taints", [])}
                return bool(ready) and ready[0]["status"] == "True" and not keys & {
                    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
            wait_for(taken_in, 60, f"imitated node {k.name} Ready", interval=0.5)
    except BaseException:
        sc.close()
        raise
    REPORT["lost_nodes_registered_s"] = round(time.monotonic() - t0, 1)
    yield sc
    sc.close()
