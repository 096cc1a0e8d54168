"""The lost node of the node stage (tests/node/test_node_3_lost_node.py): extra Nodes whose kubelet
the test imitates, so that the real kube-controller-manager (node lifecycle, taint eviction, PodGC)
decides what happens when it stops, while the stage's real kubelet keeps running the exporter,
Prometheus and Alertmanager (docs/decisions/node.md, "A lost node").

- ``ImitatedKubelet`` does what a kubelet does for its Node and nothing more: it registers the Node
  (with a NoSchedule taint, as ``registerWithTaints`` would, so the scheduler never places the
  stage's pods there), posts its status Ready, renews its heartbeat Lease in ``kube-node-lease``
  every 10 s (the kubelet's renew interval), and posts the status of the pods bound to it. Stopping
  it stops the heartbeats: nothing else tells the controller the node is gone.
- ``Lost`` is the scenario: a TerraformMachine per node, an own runner pod (CAPTF's labels, a name
  of CAPTF's Job pattern) bound to the node by ``spec.nodeName`` and holding the object's lock.
- ``Monitor`` samples, every second, what each party says (the Node's Ready condition and taints,
  the pod, the exporter's series read from both replicas' ``/metrics`` and through Prometheus, the
  webhook) and keeps the first time each thing was seen, so the figures do not depend on when a
  test happens to look. The replicas are read directly because the chart's ServiceMonitor scrapes
  every 30 s: through Prometheus a change shows up to 30 s late, which says nothing of the exporter.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import requests
from prometheus_client.parser import text_string_to_metric_families
from requests.adapters import HTTPAdapter

from pykit.builders import lock_lease, pod, runner_pod_name, terraform_object
from pykit.controlplane import Kube
from pykit.node import KUBE_VERSION, Node

M = "TerraformMachine"
NS = "tenant-lost"
LOST = "captf_state_lock_holder_node_lost_timestamp_seconds"
UNREACHABLE = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
#: the taint the imitated kubelets register with: no pod of the stage's is ever scheduled there
IMITATED_TAINT = {"key": "captf.test/imitated-kubelet", "value": "true", "effect": "NoSchedule"}
#: the kubelet's defaults: nodeLeaseDurationSeconds 40, renewed every quarter of it
LEASE_SECONDS = 40
RENEW_SECONDS = 10


def micro(t: float) -> str:
    """A MicroTime as the API writes it."""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


def ready_condition(node_obj: dict[str, Any] | None) -> dict[str, Any] | None:
    for c in (node_obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c
    return None


def taints(node_obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return (node_obj or {}).get("spec", {}).get("taints", []) or []


def pod_condition(p: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in (p or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return None


class ImitatedKubelet:
    """The kubelet of Node ``name``, as far as the API server sees one: registration, status,
    heartbeats, and the status of its pods. It runs no container."""

    def __init__(self, node: Node, name: str, ip: str):
        self.name = name
        self.ip = ip
        # a client of its own: requests' Session is not shared across threads
        self.kube = Kube(node.url, node.admin_token, node.ca_file)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_renew: float | None = None
        self.stopped_at: float | None = None
        self.errors: list[str] = []

    # ---- the Node ----

    def _conditions(self, now: float) -> list[dict[str, Any]]:
        def c(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": stamp(now), "lastTransitionTime": stamp(now)}
        return [c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                c("Ready", "True", "KubeletReady", "kubelet is posting ready status")]

    def register(self) -> None:
        """Creates the Node as a kubelet registers it, posts its status and creates its Lease."""
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
        self.kube.request("POST", "/api/v1/nodes", json={
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": [IMITATED_TAINT]}})
        self.post_ready()
        created = self.kube.get_obj("nodes", None, self.name)
        now = time.time()
        self.kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", json={
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": "kube-node-lease",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                              "uid": created["metadata"]["uid"]}]},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS,
                     "acquireTime": micro(now), "renewTime": micro(now)}})
        self.last_renew = now

    def post_ready(self) -> float:
        """Posts the node's status as a starting kubelet does: every condition fresh, Ready True."""
        now = time.time()
        self.kube.patch("nodes", None, self.name, {"status": {
            "conditions": self._conditions(now),
            "addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.name}],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "10", "ephemeral-storage": "10Gi"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10", "ephemeral-storage": "10Gi"},
            "nodeInfo": {"kubeletVersion": KUBE_VERSION, "kubeProxyVersion": "", "osImage": "imitated",
                         "operatingSystem": "linux", "architecture": "amd64", "kernelVersion": "",
                         "containerRuntimeVersion": "none://0", "machineID": "", "systemUUID": "", "bootID": ""},
        }}, sub="status")
        return now

    def _renew(self) -> None:
        now = time.time()
        self.kube.patch("leases", "kube-node-lease", self.name, {"spec": {"renewTime": micro(now)}})
        self.last_renew = now

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew()
            except Exception as e:  # noqa: BLE001 - a missed heartbeat is what a kubelet has too
                self.errors.append(f"{time.time():.0f} renew: {e!r}"[:300])
            self._stop.wait(RENEW_SECONDS)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """The kubelet stops: no more heartbeats, no more status. Returns when it stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.stopped_at = time.time()
        return self.stopped_at

    def resume(self) -> float:
        """The kubelet is back: it posts Ready and heartbeats again. Returns when Ready was posted."""
        t = self.post_ready()
        self._renew()
        self.start()
        return t

    # ---- its pods ----

    def post_pod_running(self, ns: str, name: str) -> None:
        """The pod's status as this kubelet reports a started container, Ready."""
        p = self.kube.get_obj("pods", ns, name)
        now = stamp(time.time())
        start = p.get("status", {}).get("startTime") or now
        octet = sum(self.name.encode()) % 250 + 2
        conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
        c = p["spec"]["containers"][0]
        self.kube.patch("pods", ns, name, {"status": {
            "phase": "Running", "hostIP": self.ip, "hostIPs": [{"ip": self.ip}],
            "podIP": f"10.89.{octet}.10", "podIPs": [{"ip": f"10.89.{octet}.10"}], "startTime": start,
            "conditions": conds,
            "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": c["image"],
                                   "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
                                   "ready": True, "started": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": start}}}],
        }}, sub="status")

    def close(self) -> None:
        self.stop()
        self.kube.close()


@dataclass
class Lost:
    """One lost-node case: the node, its imitated kubelet, the object whose lock its runner holds."""

    kubelet: ImitatedKubelet
    obj: str
    #: the runner's toleration of the unreachable taint, in seconds
    tolerate_unreachable_s: int
    pod: str = ""
    seen: dict[str, float] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def node(self) -> str:
        return self.kubelet.name

    def runner_pod(self) -> dict[str, Any]:
        """CAPTF's runner pod of the object (its labels, a name of its Job pattern), bound to the
        node by spec.nodeName as the scheduler would have bound it; the default grace period."""
        body = pod(NS, runner_pod_name(M, self.obj), kind=M, owner=self.obj)
        body.pop("status")
        body["spec"] = {
            "nodeName": self.node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": False,
            "containers": [{"name": "runner", "image": "captf.local/captf-runner:v1", "imagePullPolicy": "IfNotPresent"}],
            "tolerations": [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": self.tolerate_unreachable_s}],
        }
        return body

    def start(self, kube: Kube) -> None:
        kube.create(terraform_object(M, NS, self.obj))
        created = kube.create(self.runner_pod())
        self.pod = created["metadata"]["name"]
        self.kubelet.post_pod_running(NS, self.pod)
        kube.create(lock_lease(NS, M, self.obj, who=f"root@{self.pod}"))


Sample = tuple[str, dict[str, str], float]


class _ServerName(HTTPAdapter):
    """Connects to a pod's address but sends, and checks the certificate for, ``name``: what
    Prometheus does with the ServiceMonitor's serverName."""

    def __init__(self, name: str):
        self.name = name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kw: Any) -> None:
        kw["server_hostname"] = self.name
        super().init_poolmanager(*args, **kw)


class Replicas:
    """Each Ready replica's ``/metrics``, read from the node as Prometheus reads it: HTTPS verified
    against the release's CA for the Service's name, with a token of Prometheus' own ServiceAccount
    (the release's metrics reader)."""

    def __init__(self, addresses: Callable[[], list[str]], token: str, ca_file: Path, server_name: str):
        self.addresses = addresses
        self.http = requests.Session()
        self.http.verify = str(ca_file)
        self.http.trust_env = False  # REQUESTS_CA_BUNDLE in the environment would replace verify
        self.http.mount("https://", _ServerName(server_name))
        self.http.headers["Authorization"] = f"Bearer {token}"

    def scrape(self) -> list[list[Sample]]:
        out = []
        for ip in self.addresses():
            r = self.http.get(f"https://{ip}:9820/metrics", timeout=5, headers={"Accept": "text/plain; version=0.0.4"})
            r.raise_for_status()
            out.append([(x.name, dict(x.labels), float(x.value))
                        for fam in text_string_to_metric_families(r.text) for x in fam.samples])
        return out

    def close(self) -> None:
        self.http.close()


class Monitor:
    """Every second: each case's Node, pod, series and page, first sightings kept in ``Lost.seen``
    (wall-clock seconds) with the values seen then in ``Lost.values``."""

    def __init__(self, node: Node, query: Callable[[str], list[dict[str, Any]]],
                 alerts: Callable[[str], list[dict[str, Any]]], replicas: Replicas, cases: list[Lost]):
        self.kube = Kube(node.url, node.admin_token, node.ca_file)
        self.query = query
        self.alerts = alerts
        self.replicas = replicas
        self.cases = cases
        self.errors: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lost-node-monitor", daemon=True)

    def start(self) -> "Monitor":
        self._thread.start()
        return self

    def _mark(self, case: Lost, what: str, value: Any = None) -> None:
        if what not in case.seen:
            case.seen[what] = time.time()
            case.values[what] = value

    def sample(self, case: Lost, scraped: list[list[Sample]]) -> None:
        r = self.kube.get(f"/api/v1/nodes/{case.node}")
        n = r.json() if r.status_code == 200 else None
        ready = ready_condition(n)
        keys = {(t["key"], t["effect"]) for t in taints(n)}
        if ready and ready["status"] == "Unknown":
            self._mark(case, "unknown", ready)
        if (UNREACHABLE, "NoExecute") in keys:
            self._mark(case, "unreachable_taint")
        if "acted" in case.seen and ready and ready["status"] == "True":
            self._mark(case, "ready_again", ready)
        if "acted" in case.seen and "unreachable_taint" in case.seen and (UNREACHABLE, "NoExecute") not in keys:
            self._mark(case, "unreachable_taint_removed")
        p = self.kube.get(f"/api/v1/namespaces/{NS}/pods/{case.pod}")
        if p.status_code == 404:
            self._mark(case, "pod_gone")
        elif p.status_code == 200:
            pj = p.json()
            if pj["metadata"].get("deletionTimestamp"):
                self._mark(case, "pod_deleting", {"deletionTimestamp": pj["metadata"]["deletionTimestamp"],
                                                  "disruption": pod_condition(pj, "DisruptionTarget")})
            if pj.get("status", {}).get("phase") == "Failed":
                self._mark(case, "pod_failed", pod_condition(pj, "DisruptionTarget"))
        # the replicas themselves: the series on any (its first sighting), on none (its end)
        mine = [[(n, lb, v) for (n, lb, v) in samples if lb.get("namespace") == NS and lb.get("name") == case.obj]
                for samples in scraped]
        lost = [[(lb, v) for (n, lb, v) in m if n == LOST] for m in mine]
        if any(lost):
            self._mark(case, "exporter_series", [x for r in lost for x in r])
        elif scraped and "exporter_series" in case.seen and "acted" in case.seen:
            self._mark(case, "exporter_series_gone")
        classes = {lb.get("class") for m in mine for (n, lb, v) in m if n == "captf_state_lock_info"}
        if scraped and classes == {"own_stale"} and "acted" in case.seen:
            self._mark(case, "exporter_own_stale")
        # and through Prometheus (the chart's ServiceMonitor scrapes every 30 s)
        series = self.query(f'{LOST}{{namespace="{NS}",name="{case.obj}"}}')
        if series:
            self._mark(case, "series", series)
        elif "series" in case.seen and "acted" in case.seen:
            # only after the test acted (the fix, the node back): a rollout of the exporter can
            # leave a scrape without the series for a moment, which is not the series going
            self._mark(case, "series_gone")
        klass = {s["metric"].get("class") for s in self.query(f'captf_state_lock_info{{namespace="{NS}",name="{case.obj}"}}')}
        if klass == {"own_stale"} and "acted" in case.seen:
            self._mark(case, "own_stale")
        paged = [a for a in self.alerts("CAPTFStateLockHolderNodeLost") if a["labels"].get("name") == case.obj]
        if paged:
            self._mark(case, "alert", paged[0])

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                scraped = self.replicas.scrape()
            except Exception as e:  # noqa: BLE001 - a replica going (a rollout): this second is skipped
                self.errors.append(f"{time.time():.0f} replicas: {e!r}"[:300])
                scraped = []
            for case in self.cases:
                try:
                    self.sample(case, scraped)
                except Exception as e:  # noqa: BLE001 - kept and shown by the tests
                    self.errors.append(f"{time.time():.0f} {case.node}: {e!r}"[:300])
            self.samples += 1
            self._stop.wait(1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.kube.close()
        self.replicas.close()


@dataclass
class Scenario:
    """What the tests of the lost node share: the two cases, the monitor, when the kubelets stopped."""

    node: Node
    lost: Lost
    back: Lost
    monitor: Monitor | None = None
    stopped_at: float | None = None

    @property
    def cases(self) -> list[Lost]:
        return [self.lost, self.back]

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        for c in self.cases:
            c.kubelet.close()
