"""Self-tests of the harness: builders against CAPTF's test vectors (docs/contract.md 2.10), and the emulator alone.

These need no exporter binary; they prove that what the other tests feed the exporter is what
CAPTF and a Kubernetes API server would give it.
"""

from __future__ import annotations

import json
import threading

import pytest
import requests

from pykit.builders import (
    LOCK_INFO_ANNOTATION,
    job_name,
    lock_info_doc,
    lock_lease,
    pod,
    runner_pod_name,
    state_suffix,
)
from pykit.kube import ALL_RESOURCES, RESOURCES, KubeEmulator
from pykit.net import wait_for


def test_state_suffix_matches_captf_vectors() -> None:
    assert state_suffix("fixtures", "TerraformMachine", "terraform-locked") == "48db616173c97a97-m"
    assert state_suffix("fixtures", "TerraformMachine", "opentofu-locked") == "8319cb71b6c50144-m"


def test_job_and_pod_names_match_captf_vectors() -> None:
    assert job_name("m", "web", "apply", 3, "abcdef") == "captf-m-web-apply-a3-abcdef"
    assert runner_pod_name("TerraformMachine", "web") == "captf-m-web-apply-a1-abc123-x7k2p"
    assert runner_pod_name("TerraformMachine", "web-1", "drift", 12) == "captf-m-web-1-drift-a12-abc123-x7k2p"
    assert runner_pod_name("TerraformMachine", "n" * 60, "destroy", 3) == \
        "captf-m-fb886b452111b2ed-destroy-a3-abc123-x7k2p"


def test_lock_lease_shape() -> None:
    info = lock_info_doc("alice@laptop")
    obj = lock_lease("ns1", "TerraformMachine", "web", lock_info=info)
    assert obj["metadata"]["name"] == "lock-tfstate-default-" + state_suffix("ns1", "TerraformMachine", "web")
    assert obj["spec"]["holderIdentity"] == info["ID"]
    doc = json.loads(obj["metadata"]["annotations"][LOCK_INFO_ANNOTATION])
    assert set(doc) == {"ID", "Operation", "Info", "Who", "Version", "Created", "Path"}
    assert doc["Created"].endswith("Z") and len(doc["Created"].split(".")[1]) == 10  # 9 digits + Z
    labels = obj["metadata"]["labels"]
    assert labels["tfstate"] == "true"
    assert labels["tfstateSecretSuffix"] == state_suffix("ns1", "TerraformMachine", "web")
    assert labels["captf.infrastructure.cluster.x-k8s.io/owner-kind"] == "TerraformMachine"
    assert labels["captf.infrastructure.cluster.x-k8s.io/owner-name"] == "web"


@pytest.fixture
def emu() -> KubeEmulator:
    e = KubeEmulator().start()
    yield e
    e.stop()


def test_emulator_serves_declared_resources_only(emu: KubeEmulator) -> None:
    for r in (RESOURCES[k] for k in ALL_RESOURCES):
        resp = requests.get(emu.url + r.path(), timeout=5)
        assert resp.status_code == 200, (r.plural, resp.text[:200])
        assert resp.json()["items"] == []
    groups = {g["name"] for g in requests.get(emu.url + "/apis", timeout=5).json()["groups"]}
    assert {"coordination.k8s.io", "events.k8s.io", "infrastructure.cluster.x-k8s.io",
            "cluster.x-k8s.io"} <= groups
    rl = requests.get(emu.url + "/apis/infrastructure.cluster.x-k8s.io/v1alpha1", timeout=5).json()
    assert {(x["name"], x["kind"], x["namespaced"]) for x in rl["resources"]} == {
        ("terraformclusters", "TerraformCluster", True),
        ("terraformmachines", "TerraformMachine", True),
        ("terraformmachinepools", "TerraformMachinePool", True),
        ("terraformplans", "TerraformPlan", True),
    }


def test_emulator_without_a_crd_answers_404() -> None:
    e = KubeEmulator([p for p in ALL_RESOURCES if p != "terraformmachinepools"]).start()
    try:
        resp = requests.get(e.url + RESOURCES["terraformmachinepools"].path(), timeout=5)
        assert resp.status_code == 404
        assert requests.get(e.url + RESOURCES["terraformmachines"].path(), timeout=5).status_code == 200
    finally:
        e.stop()


def test_emulator_list_watch_and_resource_versions(emu: KubeEmulator) -> None:
    obj = lock_lease("ns1", "TerraformMachine", "web", who="alice@laptop")
    name = obj["metadata"]["name"]
    created = emu.create(obj)
    items = emu.list("leases")
    assert [i["metadata"]["name"] for i in items] == [name]

    events: list[dict] = []

    def watch() -> None:  # reads the ADDED and the MODIFIED event, then closes the stream itself
        try:
            with requests.get(emu.url + RESOURCES["leases"].path() + "?watch=true", stream=True,
                              timeout=(5, 10)) as resp:
                for line in resp.iter_lines():
                    if line:
                        events.append(json.loads(line))
                    if len(events) >= 2:
                        return
        except Exception as e:  # noqa: BLE001 - reported through the assertions below
            events.append({"type": "ERROR", "object": repr(e)})

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    # a new watch first re-sends every object as ADDED
    wait_for(lambda: len(events) >= 1, 5, "the initial ADDED event")
    emu.wait_watched(["leases"], timeout=5)
    emu.release_lock("ns1", name)
    wait_for(lambda: len(events) >= 2, 5, "the MODIFIED event")
    t.join(5)
    assert [e["type"] for e in events[:2]] == ["ADDED", "MODIFIED"]
    released = events[1]["object"]
    assert "holderIdentity" not in released["spec"]
    assert LOCK_INFO_ANNOTATION not in released["metadata"].get("annotations", {})
    assert int(released["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    # the harness's own requests are flagged: only this test's raw watch counts as "not harness"
    others = emu.exporter_requests()
    assert [(r.method, r.action, r.resource) for r in others] == [("GET", "WATCH", "leases")]


def test_emulator_pod_deletion_and_terminating_pod(emu: KubeEmulator) -> None:
    emu.create(pod("ns1", "p-live", "Running"))
    emu.create(pod("ns1", "p-term", "Running", deleting=True))
    assert emu.get("pods", "ns1", "p-term").json()["metadata"]["deletionTimestamp"]
    emu.delete("pods", "ns1", "p-live")
    assert emu.get("pods", "ns1", "p-live").status_code == 404
    assert {i["metadata"]["name"] for i in emu.list("pods")} == {"p-term"}
