"""--namespaces: only the listed namespaces are watched, and only through namespaced requests."""

from __future__ import annotations

from typing import Callable

import pytest

from pykit.builders import lock_lease, terraform_object
from pykit.exporter import E, Exporter, wait_samples
from pykit.kube import ALL_RESOURCES, KubeEmulator

M = "TerraformMachine"


# Nodes are cluster-scoped: a namespaced exporter does not watch them (docs/contract.md 8.1)
@pytest.mark.kube(omit=["nodes"])
def test_namespace_list_limits_the_watches(kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    for ns in ("team-a", "team-b", "team-c"):
        kube.create(terraform_object(M, ns, "web"))
        kube.create(lock_lease(ns, M, "web", who=f"alice@{ns}-laptop"))
    exp = start_exporter(extra_args=("--namespaces", "team-a,team-b"))
    expects = [E("captf_state_lock_info", 1, namespace=ns, kind=M, name="web", **{"class": "foreign"})
               for ns in ("team-a", "team-b")]
    expects += [E("captf_state_locks_held", 2, **{"class": "foreign"})]
    expects += [E("captf_lock_exporter_watch_up", 1, resource=r) for r in ALL_RESOURCES if r != "nodes"]
    expects += [E("captf_lock_exporter_watch_up", None, resource="nodes")]
    wait_samples(exp, expects, 20, "the locks of team-a and team-b only")
    # A change in a listed namespace arrives; one in another namespace does not.
    kube.create(lock_lease("team-c", M, "db", who="bob@desk"))
    kube.create(lock_lease("team-b", M, "db", who="bob@desk"))
    metrics = wait_samples(exp, [E("captf_state_lock_info", 1, namespace="team-b", kind=M, name="db",
                                   **{"class": "foreign"})], 20, "a new lock in team-b")
    assert metrics.get("captf_state_lock_held", namespace="team-c", kind=M, name="web") is None
    assert metrics.get("captf_state_lock_info", namespace="team-c", kind=M, name="db",
                       **{"class": "foreign"}) is None
    # Every request of the exporter names one of the listed namespaces.
    paths = {r.path for r in kube.exporter_requests()}
    assert paths, "the exporter made no request"
    outside = sorted(p for p in paths if "/namespaces/team-a/" not in p and "/namespaces/team-b/" not in p)
    assert not outside, f"requests outside the listed namespaces: {outside}"
