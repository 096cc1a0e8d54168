"""A runner pod that ends (Failed, Succeeded) or disappears turns its lock own_stale, quickly."""

from __future__ import annotations

import time

import pytest

from pykit.builders import lock_lease, pod, runner_pod_name, terraform_object
from pykit.exporter import E, LATENCIES, Exporter, wait_metric, wait_samples
from pykit.kube import KubeEmulator
from pykit.net import wait_for

NS = "team-a"
M = "TerraformMachine"
LATENCY_LIMIT_S = 5.0  # the target is well under 2 s


def labels(name: str) -> dict[str, str]:
    return {"namespace": NS, "kind": M, "name": name}


@pytest.mark.parametrize("change", ["failed", "succeeded", "deleted"])
def test_runner_pod_end_makes_lock_own_stale(kube: KubeEmulator, exporter: Exporter, change: str,
                                             request: pytest.FixtureRequest) -> None:
    kube.create(terraform_object(M, NS, "web"))
    pod_name = runner_pod_name(M, "web", "apply", 3, "0f1e2d")
    kube.create(pod(NS, pod_name, "Running", kind=M, owner="web", attempt=3))
    kube.create(lock_lease(NS, M, "web", who=f"root@{pod_name}"))
    wait_samples(exporter, [
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_live"}),
        E("captf_state_locks_held", 1, **{"class": "own_live"}),
    ], 20, "the lock own_live while its pod runs")

    t0 = time.monotonic()
    if change == "failed":
        kube.set_pod_phase(NS, pod_name, "Failed")
    elif change == "succeeded":
        kube.set_pod_phase(NS, pod_name, "Succeeded")
    else:
        kube.delete("pods", NS, pod_name)
    m = wait_samples(exporter, [
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_stale"}),
        E("captf_state_lock_info", None, **labels("web"), **{"class": "own_live"}),
        E("captf_state_locks_held", 1, **{"class": "own_stale"}),
        E("captf_state_locks_held", 0, **{"class": "own_live"}),
    ], 15, f"the lock own_stale after the pod was {change}")
    latency = time.monotonic() - t0
    LATENCIES.append((request.node.name, f"pod {change} -> own_stale", latency))
    print(f"\nlatency pod {change} -> own_stale: {latency * 1000:.0f} ms")
    assert latency < LATENCY_LIMIT_S, f"own_stale took {latency:.2f}s (limit {LATENCY_LIMIT_S}s)"
    assert m.get("captf_state_lock_held", **labels("web")) == 1

    if change == "deleted":
        # a cache miss is confirmed by a live read of the pod before own_stale is reported
        fetches = [r for r in kube.exporter_requests()
                   if r.method == "GET" and r.action == "FETCH" and r.resource == "pods"
                   and r.path.endswith(f"/namespaces/{NS}/pods/{pod_name}")]
        assert fetches, "no live GET of the deleted pod was made"
        assert (m.get("captf_lock_exporter_pod_reads_total", result="not_found") or 0) >= 1, \
            m.all("captf_lock_exporter_pod_reads_total")


def test_lock_taken_by_a_new_runner_turns_own_live_again(kube: KubeEmulator, exporter: Exporter) -> None:
    kube.create(terraform_object(M, NS, "web"))
    old = runner_pod_name(M, "web", "apply", 1, "aaaaaa")
    kube.create(lock_lease(NS, M, "web", who=f"root@{old}"))
    wait_samples(exporter, [E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_stale"})],
                 20, "own_stale: its pod never existed")
    new = runner_pod_name(M, "web", "apply", 2, "bbbbbb")
    kube.create(pod(NS, new, "Running", kind=M, owner="web", attempt=2))
    kube.release_lock(NS, lock_lease(NS, M, "web")["metadata"]["name"])
    kube.patch("leases", NS, lock_lease(NS, M, "web")["metadata"]["name"],
               {"metadata": {"annotations": lock_lease(NS, M, "web", who=f"root@{new}")["metadata"]["annotations"]},
                "spec": {"holderIdentity": "new-id"}})
    wait_samples(exporter, [
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_live"}),
        E("captf_state_lock_info", None, **labels("web"), **{"class": "own_stale"}),
    ], 20, "own_live under the new runner")


def test_unreadable_pod_is_own_unverified_until_it_can_be_read(kube: KubeEmulator,
                                                               start_exporter) -> None:
    """A holder pod missing from the cache whose live read fails is own_unverified, never guessed.

    kmock answers the pod's GET with 500 (failure injection; kube-rs's client retries 429/503/504
    itself, for minutes); once the API answers again (404),
    the periodic re-read (--pod-recheck-interval 1s) settles it as own_stale.
    """
    kube.create(terraform_object(M, NS, "web"))
    pod_name = runner_pod_name(M, "web", "apply", 4, "c0ffee")
    inj = kube.fail_get(f"/api/v1/namespaces/{NS}/pods/{pod_name}", 500, "InternalError")
    exp = start_exporter(extra_args=("--pod-recheck-interval", "1s"))
    kube.create(lock_lease(NS, M, "web", who=f"root@{pod_name}"))
    m = wait_samples(exp, [
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_unverified"}),
        E("captf_state_locks_held", 1, **{"class": "own_unverified"}),
        E("captf_state_locks_held", 0, **{"class": "own_stale"}),
        E("captf_state_locks_held", 0, **{"class": "own_live"}),
    ], 20, "own_unverified while the pod cannot be read")
    wait_for(lambda: inj.hits >= 1, 20, "a live read of the holder pod (answered 500)")
    m = wait_metric(exp, lambda m: (m.get("captf_lock_exporter_pod_reads_total", result="error") or 0) >= 1,
                    20, "pod_reads_total{result=error} to count the failed read")
    # still unverified after the failed read: never guessed as stale (or live), never overdue
    assert m.get("captf_state_lock_info", **labels("web"), **{"class": "own_unverified"}) == 1, \
        m.all("captf_state_lock_info")
    assert m.get("captf_state_lock_overdue", **labels("web")) == 0

    inj.clear()
    wait_samples(exp, [
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "own_stale"}),
        E("captf_state_locks_held", 0, **{"class": "own_unverified"}),
    ], 20, "own_stale once the pod reads as not found")
