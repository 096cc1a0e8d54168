"""The release the node stage installs and what its tests share (tests/node/test_node*.py run in
file order on one cluster): its names, the values a user sets, and small reads of its state."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from conftest import KPS_RELEASE, PROMETHEUS_SA, Monitoring
from pykit.node import Node

#: a release name of the user's, not the chart's: the objects are named <release>-<chart>
RELEASE = "locks"
FULLNAME = f"{RELEASE}-captf-lock-exporter"
NS = "captf-system"
SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=captf-lock-exporter"
SERVER_NAME = f"{FULLNAME}.{NS}.svc"
#: what the tests learn and hand on (the release's pods, its rendered manifest)
STATE: dict[str, Any] = {}


def values(node: Node, images: dict[str, str], **extra: Any) -> dict[str, Any]:
    """Only what chart/README.md tells a kube-prometheus-stack user to set: the image (here the
    local one), the ServiceMonitor, PrometheusRule and dashboards switched on with the stack's
    `release` label, Prometheus' ServiceAccount bound to the metrics reader, and, since this
    cluster's API server listens on a port of its own, that port in the policy's egress. TLS is
    the chart's default (a CA Helm makes, which the ServiceMonitor trusts)."""
    repo, tag = images["exporter"].rsplit(":", 1)
    v: dict[str, Any] = {
        "image": {"repository": repo, "tag": tag},
        "serviceMonitor": {"enabled": True, "labels": {"release": KPS_RELEASE}},
        "prometheusRule": {"enabled": True, "labels": {"release": KPS_RELEASE}},
        "dashboards": {"enabled": True},
        "metricsReader": {"serviceAccounts": [{"name": PROMETHEUS_SA, "namespace": "monitoring"}]},
        "networkPolicy": {"egress": {"apiServerPorts": [443, node.port]}},
    }
    v.update(extra)
    return v


def write_values(node: Node, name: str, v: dict[str, Any]) -> Path:
    p = node.w / f"{name}.yaml"
    p.write_text(yaml.safe_dump(v))
    return p


def ready_pods(node: Node) -> list[dict[str, Any]]:
    return [p for p in node.pods(NS, SELECTOR) if Node.is_ready(p)]


def exporter_targets(mon: Monitoring, ns: str = NS, service: str = FULLNAME,
                     job: str = "captf-lock-exporter") -> list[dict[str, Any]]:
    """The release's targets: its job, namespace and Service (the kustomize sidecar's have the same
    job and namespace, another Service)."""
    return [t for t in mon.api("/api/v1/targets?state=active")["activeTargets"]
            if t["labels"].get("job") == job and t["labels"].get("namespace") == ns
            and t["labels"].get("service") == service]


def tls_secret(node: Node, ns: str = NS, name: str = f"{FULLNAME}-tls") -> dict[str, bytes]:
    sec = node.kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}").json()
    return {k: base64.b64decode(v) for k, v in sec.get("data", {}).items()}


def scrape_job(mon: Monitoring, ns: str, fullname: str) -> dict[str, Any]:
    """The scrape job the operator generated from the release's ServiceMonitor."""
    want = f"serviceMonitor/{ns}/{fullname}/0"
    jobs = [j for j in mon.scrape_config().get("scrape_configs", []) if j["job_name"] == want]
    assert len(jobs) == 1, (want, [j["job_name"] for j in mon.scrape_config().get("scrape_configs", [])])
    return jobs[0]
