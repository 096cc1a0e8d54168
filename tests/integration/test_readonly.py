"""Read-only: every request the exporter makes to the API server is a GET on an allowed resource.

kmock records every request it serves; the harness tags its own writes with a header, so what is
left is the exporter's.
"""

from __future__ import annotations

import collections

from pykit.builders import (
    force_unlock_event,
    lease_name,
    lock_lease,
    pod,
    runner_pod_name,
    state_suffix,
    terraform_object,
)
from pykit.exporter import E, Exporter, wait_samples
from pykit.kube import ALL_RESOURCES, RESOURCES, KubeEmulator

NS = "team-a"
M = "TerraformMachine"
ALLOWED = {(r.group, r.plural) for r in RESOURCES.values()}


def test_exporter_only_reads(kube: KubeEmulator, exporter: Exporter) -> None:
    # a busy scenario: locks of every kind of holder, a runner pod deleted (forces a live read),
    # a release, a force-unlock event, timeout inheritance objects
    kube.create(terraform_object("TerraformCluster", NS, "tc", defaults_jobs={"lockTimeoutSeconds": 60}))
    kube.create({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                 "metadata": {"name": "cl", "namespace": NS},
                 "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                "kind": "TerraformCluster", "name": "tc"}}})
    kube.create(terraform_object(M, NS, "web", cluster_label="cl"))
    kube.create(terraform_object(M, NS, "db", cluster_label="cl"))
    p = runner_pod_name(M, "web")
    kube.create(pod(NS, p, "Running", kind=M, owner="web"))
    kube.create(lock_lease(NS, M, "web", who=f"root@{p}"))
    kube.create(lock_lease(NS, M, "db", who="alice@laptop"))
    wait_samples(exporter, [
        E("captf_state_lock_info", 1, namespace=NS, kind=M, name="web", **{"class": "own_live"}),
        E("captf_state_lock_info", 1, namespace=NS, kind=M, name="db", **{"class": "foreign"}),
    ], 20, "locks classified")
    kube.delete("pods", NS, p)
    wait_samples(exporter, [
        E("captf_state_lock_info", 1, namespace=NS, kind=M, name="web", **{"class": "own_stale"}),
    ], 20, "own_stale after the pod is gone")
    kube.create(force_unlock_event(NS, M, "web", "captf-m-web-apply-a2-abc123"))
    kube.release_lock(NS, lease_name(state_suffix(NS, M, "web")))
    wait_samples(exporter, [
        E("captf_state_lock_held", 0, namespace=NS, kind=M, name="web"),
        E("captf_state_lock_force_unlocks_total", 1, namespace=NS, kind=M, name="web"),
    ], 20, "released and force-unlock counted")
    for _ in range(3):
        exporter.scrape()  # a scrape makes no API request either (checked below by the method set)

    reqs = kube.exporter_requests()
    summary = collections.Counter((r.method, r.action or "-", r.resource or r.path) for r in reqs)
    print("\nexporter requests:\n" + "\n".join(f"  {n:4d} {k}" for k, n in sorted(summary.items())))
    assert reqs, "the emulator recorded no request from the exporter"
    not_get = [(r.method, r.path) for r in reqs if r.method != "GET"]
    assert not_get == [], f"non-GET requests: {not_get}"

    # resource requests only touch the resources of docs/contract.md section 10
    # (group, plural) of every Kubernetes resource request; discovery paths have no plural
    for r in reqs:
        parts = r.path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group = ""
        elif parts[0] == "apis" and len(parts) >= 4:
            group = parts[1]
        else:
            continue  # /api, /apis, /api/v1, /apis/<g>, /apis/<g>/<v>, /version: discovery
        assert r.resource is not None, r
        assert (group, r.resource) in ALLOWED, f"request outside the allowed resources: {r.method} {r.path}"
    watched = {r.resource for r in reqs if r.action == "WATCH"}
    expected = {RESOURCES[k].plural for k in ALL_RESOURCES}
    assert watched == expected, f"watched {sorted(watched)}, expected {sorted(expected)}"
