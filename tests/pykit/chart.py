"""The chart as a cluster gets it: rendered by the real Helm engine (helm-python-sdk, as
tools/chart/check.sh does) and its ServiceAccount and RBAC applied to a real API server, with a
token of that ServiceAccount from the TokenRequest API (used by tests/realkube and tests/e2e)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykit.controlplane import ROOT, Kube

RELEASE = "captf-lock-exporter"
RELEASE_NS = "captf-system"


def render_chart(values: dict[str, Any], namespace: str = RELEASE_NS, name: str = RELEASE) -> list[dict[str, Any]]:
    """The chart rendered by the real Helm engine (helm-python-sdk, as tools/chart/check.sh does)."""
    import helm_python as helm
    import yaml
    with helm.Chart.load(ROOT / "chart") as chart:
        rendered = chart.render(values, name=name, namespace=namespace, is_install=True)
    objs = []
    for fname, text in sorted(rendered.items()):
        if not fname.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objs.append(doc)
    return objs


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass
class Install:
    """The chart's ServiceAccount and RBAC objects as applied, and a token of that account."""
    namespace: str
    sa: str
    token: str
    objects: list[dict[str, Any]]

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.sa}"

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def read_role(self) -> dict[str, Any]:
        """The ClusterRole that lets the exporter read the cluster (the one with the leases rule),
        as opposed to the review and reader roles the chart renders beside it."""
        (role,) = [o for o in self.of_kind("ClusterRole")
                   if any("leases" in r.get("resources", []) for r in o.get("rules", []))]
        return role


def install_chart(kube: Kube, values: dict[str, Any], name: str = RELEASE, namespace: str = RELEASE_NS) -> Install:
    objs = [o for o in render_chart(values, namespace, name) if o["kind"] in RBAC_KINDS]
    if kube.get(f"/api/v1/namespaces/{namespace}").status_code == 404:
        kube.namespace(namespace)
    for o in objs:
        if o["kind"] in ("Role", "RoleBinding") and kube.get(f"/api/v1/namespaces/{o['metadata']['namespace']}").status_code == 404:
            kube.namespace(o["metadata"]["namespace"])
        kube.apply(o)
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
    return Install(namespace, sa["metadata"]["name"], kube.token(namespace, sa["metadata"]["name"]), objs)


def metrics_reader_token(kube: Kube, install: Install, namespace: str = "monitoring",
                         sa: str = "prometheus") -> str:
    """A token of ``namespace/sa`` (created if missing) bound to the chart's metrics-reader
    ClusterRole (the one granting get on the non-resource URL /metrics): what the chart's value
    does for Prometheus' ServiceAccount."""
    if kube.get(f"/api/v1/namespaces/{namespace}").status_code == 404:
        kube.namespace(namespace)
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": namespace}})
    roles = [o for o in install.of_kind("ClusterRole")
             if any("/metrics" in r.get("nonResourceURLs", []) for r in o.get("rules", []))]
    if not roles:
        raise AssertionError("the chart renders no ClusterRole granting get on /metrics")
    name = roles[0]["metadata"]["name"]
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{name}-{namespace}-{sa}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})
    return kube.token(namespace, sa)
