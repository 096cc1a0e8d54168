"""Fixtures of the image suite: the image scripts/image.sh built, run by runc as the chart's pod
against a real kube-apiserver (tests/pykit/controlplane.py), with the in-cluster configuration a
kubelet gives a pod.

Environment:
  IMAGE_RUNTIME   runc (default) or crun
  IMAGE_REPORT    where the measurements go as JSON (default target/image/container-report.json)
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import urllib3

from pykit.chart import Install, install_chart, render_chart
from pykit.controlplane import ROOT, ControlPlane, Kube
from pykit.diagnostics import report_measurements
from pykit.exporter import Metrics, PROM_ACCEPT
from pykit.net import free_port, wait_for

sys.path.insert(0, str(ROOT / "tools" / "image"))
import oci  # noqa: E402
import runtime_spec  # noqa: E402

from container import Container, tree, unpack  # noqa: E402

pytest_plugins = ("pykit.pytest_hooks", "pykit.control_plane_fixtures")
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

NAME = "captf-lock-exporter"
#: measurements, printed at the end of the session and written to IMAGE_REPORT
REPORT: dict[str, Any] = {}


def cargo_version() -> str:
    m = re.search(r'^version = "(.*)"$', (ROOT / "Cargo.toml").read_text(), re.M)
    assert m
    return m.group(1)


def token_request(kube: Kube, ns: str, sa: str, audience: str, seconds: int,
                  bound_secret: dict[str, Any] | None = None) -> str:
    spec: dict[str, Any] = {"audiences": [audience], "expirationSeconds": seconds}
    if bound_secret is not None:
        spec["boundObjectRef"] = {"kind": "Secret", "apiVersion": "v1", "name": bound_secret["metadata"]["name"],
                                  "uid": bound_secret["metadata"]["uid"]}
    r = kube.request("POST", kube.path("serviceaccounts", ns, sa, "token"), json={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return r.json()["status"]["token"]


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def binding_secret(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    """An object for a token to be bound to: deleting it revokes the token."""
    return kube.request("POST", kube.path("secrets", ns), json={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "type": "Opaque"}).json()


@dataclass
class Pod:
    """The running container and what the test needs to talk to it."""
    container: Container
    objects: list[dict[str, Any]]
    install: Install
    volume: runtime_spec.ProjectedVolume
    ca: bytes
    audience: str
    token: str
    token_secret: str
    base_url: str
    probes: dict[str, dict[str, Any]]
    metrics_token: str
    rootfs: Path
    spec: dict[str, Any]
    tree_before: dict[str, tuple[Any, ...]]
    http: requests.Session = field(default_factory=requests.Session)

    @property
    def deployment(self) -> dict[str, Any]:
        (d,) = [o for o in self.objects if o["kind"] == "Deployment"]
        return d

    def probe(self, which: str) -> requests.Response:
        p = self.probes[which]
        self.container.check_alive()
        return self.http.get(self.base_url + p["path"], timeout=p.get("timeoutSeconds", 1), verify=False)

    def scrape(self) -> Metrics:
        """GET /metrics as Prometheus would: the probe's scheme; with https, a bearer token of a
        ServiceAccount allowed `get` on the non-resource URL /metrics."""
        from prometheus_client.parser import text_string_to_metric_families
        self.container.check_alive()
        headers = {"Accept": PROM_ACCEPT}
        if self.base_url.startswith("https"):
            headers["Authorization"] = f"Bearer {self.metrics_token}"
        r = self.http.get(self.base_url + "/metrics", headers=headers, timeout=10, verify=False)
        r.raise_for_status()
        samples = [(s.name, dict(s.labels), float(s.value))
                   for fam in text_string_to_metric_families(r.text) for s in fam.samples]
        return Metrics(samples, r.text)


def probe_of(container: dict[str, Any], kind: str) -> dict[str, Any]:
    p = dict(container[kind])
    get = p.pop("httpGet")
    port = get["port"]
    if isinstance(port, str):
        (port,) = [x["containerPort"] for x in container["ports"] if x["name"] == port]
    return dict(p, path=get["path"], port=port, scheme=get.get("scheme", "HTTP").lower())


def metrics_reader(kube: Kube, ns: str) -> str:
    """A ServiceAccount allowed GET /metrics (what a Prometheus needs against --auth=kubernetes)."""
    name = "image-test-metrics-reader"
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
    return kube.token(ns, name, 3600)


def kubernetes_service_env(host: str, port: int) -> dict[str, str]:
    """What the kubelet puts in every container for the `kubernetes` Service, enableServiceLinks
    or not (here the Service is the test's kube-apiserver on the host's loopback)."""
    addr = f"tcp://{host}:{port}"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": addr,
            f"KUBERNETES_PORT_{port}_TCP": addr, f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": str(port), f"KUBERNETES_PORT_{port}_TCP_ADDR": host}


@pytest.fixture(scope="module")
def pod(cp: ControlPlane, kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    """The chart rendered with a free port on loopback (the container shares the host's network),
    its ServiceAccount and RBAC applied, a bound token of 10 minutes (the least TokenRequest allows)
    projected as the kubelet does, the container started; returns once it runs (not yet ready)."""
    work = tmp_path_factory.mktemp("pod")
    port = free_port()
    values = {"port": port, "listenHost": "127.0.0.1"}
    objects = render_chart(values)
    install = install_chart(kube, values)
    pod_spec, c = runtime_spec.deployment_container(objects)
    probes = {k: probe_of(c, k) for k in ("readinessProbe", "livenessProbe")}
    schemes = {p["scheme"] for p in probes.values()}
    assert len(schemes) == 1, f"probes disagree on the scheme: {probes}"
    base_url = f"{schemes.pop()}://127.0.0.1:{port}"

    # the token a kubelet would project: audience = the API server's (its issuer), short expiry,
    # bound to an object whose deletion revokes it
    audience = cp.url
    secret = binding_secret(kube, install.namespace, "image-test-token-a")
    token = token_request(kube, install.namespace, install.sa, audience, 600, secret)
    ca = cp.ca_file.read_bytes()
    volume = runtime_spec.ProjectedVolume(work / "volumes" / "kube-api-access")
    volume.update({"token": token.encode(), "ca.crt": ca, "namespace": install.namespace.encode()})

    bundle = work / "bundle"
    unpack(f"{NAME}:{cargo_version()}", bundle)
    etc = work / "etc"
    etc.mkdir()
    hostname = f"{NAME}-7d9f8b6c5d-x2x4q"
    (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.0.1\t{hostname}\n")
    (etc / "hostname").write_text(hostname + "\n")
    (etc / "resolv.conf").write_text(Path("/etc/resolv.conf").read_text() if Path("/etc/resolv.conf").exists() else "")
    term = work / "termination-log"
    term.write_text("")
    os.chmod(term, 0o666)
    image_config = json.loads((bundle / "config.json").read_text())  # umoci's translation of the image config
    manifest_cfg = oci.load(ROOT / "target" / "image" / "oci", f"{NAME}:{cargo_version()}").config
    spec = runtime_spec.runtime_spec(
        objects, manifest_cfg, hostname=hostname, sa_volume=volume.path, etc_dir=etc, termination_log=term,
        env=kubernetes_service_env("127.0.0.1", cp.apiserver.port),
        cgroups_path=f"captf-image-test-{os.getpid()}")
    # umoci's own config.json is kept beside for comparison; runc reads ours
    (bundle / "umoci-config.json").write_text(json.dumps(image_config, indent=1))
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))
    before = tree(bundle / "rootfs")

    ctr = Container(bundle, f"captf-image-test-{os.getpid()}", work / "runc-state", work / "container.log")
    metrics_token = metrics_reader(kube, install.namespace)
    p = Pod(ctr, objects, install, volume, ca, audience, token, secret["metadata"]["name"], base_url, probes,
            metrics_token, bundle / "rootfs", spec, before)
    ctr.start()
    try:
        def running() -> bool:
            ctr.check_alive()  # the runtime's own error (e.g. crun on hybrid cgroups) ends the wait
            st = ctr.state()
            return st is not None and st.get("status") == "running"
        wait_for(running, 20, "the container running")
        yield p
    finally:
        ctr.remove()
        p.http.close()
        log = ctr.log_path.read_text(errors="replace") if ctr.log_path.exists() else ""
        REPORT.setdefault("container_log_tail", log.splitlines()[-5:])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not REPORT:
        return
    out = Path(os.environ.get("IMAGE_REPORT", ROOT / "target" / "image" / "container-report.json"))
    report_measurements(terminalreporter, "image", REPORT, out, hide=("container_log_tail",))


def elapsed_since(t: float) -> float:
    return round(time.monotonic() - t, 2)
