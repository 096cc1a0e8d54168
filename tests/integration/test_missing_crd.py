"""A CRD that the API server does not serve: its watch is down, everything else keeps working."""

from __future__ import annotations

from typing import Callable

import pytest

from pykit.builders import lock_lease, terraform_object
from pykit.exporter import E, Exporter, wait_samples
from pykit.kube import ALL_RESOURCES, KubeEmulator

NS = "team-a"


@pytest.mark.kube(omit=["terraformmachinepools"])
def test_missing_machinepool_crd(kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    kube.create(terraform_object("TerraformMachine", NS, "web"))
    kube.create(lock_lease(NS, "TerraformMachine", "web", who="alice@laptop"))
    kube.create(lock_lease(NS, "TerraformMachinePool", "pool", who="bob@desk"))
    exp = start_exporter()  # waits for watches of every resource the emulator serves

    expects = [E("captf_lock_exporter_watch_up", 0, resource="terraformmachinepools")]
    expects += [E("captf_lock_exporter_watch_up", 1, resource=r)
                for r in ALL_RESOURCES if r != "terraformmachinepools"]
    expects += [
        E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachine", name="web", **{"class": "foreign"}),
        E("captf_state_lock_held", 1, namespace=NS, kind="TerraformMachine", name="web"),
        # the pool's lock is still reported, kind and name from its Lease labels
        E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachinePool", name="pool",
          **{"class": "foreign"}),
        E("captf_state_locks_held", 2, **{"class": "foreign"}),
    ]
    wait_samples(exp, expects, 20, "watch_up 0 for the missing CRD only, locks still classified")

    # changes keep flowing through the healthy watches
    kube.create(terraform_object("TerraformMachine", NS, "db"))
    kube.create(lock_lease(NS, "TerraformMachine", "db", who="carol@ws"))
    wait_samples(exp, [
        E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachine", name="db", **{"class": "foreign"}),
        E("captf_lock_exporter_watch_up", 0, resource="terraformmachinepools"),
    ], 20, "a new lock reported while the pool CRD is missing")
    assert exp.get("/healthz").status_code == 200


@pytest.mark.kube(omit=["terraformmachinepools"])
def test_crd_installed_later(kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    kube.create(lock_lease(NS, "TerraformMachinePool", "pool", who="bob@desk"))
    exp = start_exporter()
    wait_samples(exp, [
        E("captf_lock_exporter_watch_up", 0, resource="terraformmachinepools"),
        E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachinePool", name="pool",
          **{"class": "foreign"}),
    ], 20, "the pool CRD missing")

    kube.add_resource("terraformmachinepools")
    kube.create(terraform_object("TerraformMachinePool", NS, "pool", jobs={"lockTimeoutSeconds": 42}))
    # the exporter retries with its watch backoff (kube-runtime's default: up to 30 s between tries)
    wait_samples(exp, [
        E("captf_lock_exporter_watch_up", 1, resource="terraformmachinepools"),
        E("captf_state_lock_timeout_seconds", 42, namespace=NS, kind="TerraformMachinePool", name="pool"),
        E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachinePool", name="pool",
          **{"class": "foreign"}),
    ], 45, "the pool CRD served: watch up and the pool known")


@pytest.mark.kube(omit=["terraformplans"])
def test_missing_terraformplan_crd(kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    """An older CAPTF without TerraformPlans: that watch is down, the rest (CAPTF's verdict included)
    keeps working, and no pending plan is claimed."""
    kube.create(terraform_object("TerraformMachinePool", NS, "pool"))
    kube.create(lock_lease(NS, "TerraformMachinePool", "pool", who="bob@desk"))
    exp = start_exporter()
    expects = [E("captf_lock_exporter_watch_up", 0, resource="terraformplans")]
    expects += [E("captf_lock_exporter_watch_up", 1, resource=r) for r in ALL_RESOURCES if r != "terraformplans"]
    expects += [E("captf_state_lock_info", 1, namespace=NS, kind="TerraformMachinePool", name="pool",
                  **{"class": "foreign"}),
                E("captf_state_lock_verdict_mismatch", 0, namespace=NS, kind="TerraformMachinePool", name="pool")]
    m = wait_samples(exp, expects, 20, "watch_up 0 for terraformplans only")
    assert m.all("captf_state_lock_plan_pending") == []
