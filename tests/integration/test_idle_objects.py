"""The default exposition: per-object series only for objects with something to tell (docs/contract.md
7.2; docs/decisions/series-that-say-something.md). An idle object has none; a held lock, a force-unlock
seen, show the object's series; a released lock with nothing else leaves the body again."""

from __future__ import annotations

from typing import Callable

from pykit.builders import force_unlock_event, lease_name, lock_lease, state_suffix, terraform_object
from pykit.exporter import E, Exporter, wait_metric, wait_samples
from pykit.kube import KubeEmulator

NS = "idle"
M = "TerraformMachine"


def present(m, name: str) -> bool:
    return m.get("captf_state_lock_timeout_seconds", namespace=NS, kind=M, name=name) is not None


def test_only_objects_with_something_to_tell_have_series(
        kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    for name in ("quiet", "locked", "forced"):
        kube.create(terraform_object(M, NS, name))
    kube.create(lock_lease(NS, M, "locked", who="bob@laptop"))
    exp = start_exporter(idle_objects=False)
    m = wait_samples(exp, [
        E("captf_state_lock_held", 1, namespace=NS, kind=M, name="locked"),
        E("captf_state_lock_timeout_seconds", 300, namespace=NS, kind=M, name="locked"),
        E("captf_state_locks_held", 1, **{"class": "foreign"}),
    ], 20, "the held lock's object shown")
    assert not present(m, "quiet"), "an idle object has no series"
    assert m.get("captf_state_lock_held", namespace=NS, kind=M, name="quiet") is None
    assert m.get("captf_state_lock_force_unlocks_total", namespace=NS, kind=M, name="locked") is None, \
        "no force-unlock counter before a force-unlock"

    # A force-unlock of an object with nothing else: its series appear, the counter at 1.
    kube.create(force_unlock_event(NS, M, "forced", "captf-m-forced-apply-a2-abc123"))
    wait_samples(exp, [
        E("captf_state_lock_force_unlocks_total", 1, namespace=NS, kind=M, name="forced"),
        E("captf_state_lock_held", 0, namespace=NS, kind=M, name="forced"),
    ], 20, "the force-unlocked object shown")

    # The lock released: the object has nothing left to tell and leaves the body.
    kube.delete("leases", NS, lease_name(state_suffix(NS, M, "locked")))
    wait_metric(exp, lambda m: not present(m, "locked") and
                m.get("captf_state_locks_held", **{"class": "foreign"}) == 0,
                20, "the released lock's object gone")
