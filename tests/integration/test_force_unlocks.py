"""Force-unlock counting from CAPTF's ForceUnlocked Events (docs/contract.md section 6)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Callable

from pykit.builders import force_unlock_event, now_utc, terraform_object
from pykit.exporter import E, PRESENT, Exporter, wait_samples
from pykit.kube import KubeEmulator

NS = "team-a"
M = "TerraformMachine"


def total(name: str, value: float | None, kind: str = M):
    return E("captf_state_lock_force_unlocks_total", value, namespace=NS, kind=kind, name=name)


def test_counter_exists_at_zero_and_counts_new_events(kube: KubeEmulator, exporter: Exporter) -> None:
    kube.create(terraform_object(M, NS, "web"))
    kube.create(terraform_object(M, NS, "db"))
    kube.create(terraform_object("TerraformMachinePool", NS, "pool"))
    wait_samples(exporter, [total("web", 0), total("db", 0), total("pool", 0, "TerraformMachinePool")],
                 20, "counters at 0 before any force-unlock")

    kube.create(force_unlock_event(NS, M, "web", "captf-m-web-apply-a2-abc123"))
    wait_samples(exporter, [total("web", 1), total("db", 0)], 20, "the first force-unlock of web counted")

    # another Job, another Event
    kube.create(force_unlock_event(NS, M, "web", "captf-m-web-apply-a3-def456"))
    wait_samples(exporter, [total("web", 2)], 20, "a second Event counted")

    # other reasons, and other objects' events, do not count for web
    other = force_unlock_event(NS, M, "web", "captf-m-web-apply-a4-aaaaaa")
    other["reason"] = "StateLocked"
    kube.create(other)
    kube.create(force_unlock_event(NS, "TerraformMachinePool", "pool", "captf-mp-pool-apply-a1-bbbbbb"))
    m = wait_samples(exporter, [total("pool", 1, "TerraformMachinePool")], 20, "the pool's Event counted")
    assert m.get("captf_state_lock_force_unlocks_total", namespace=NS, kind=M, name="web") == 2
    ts = m.get("captf_state_lock_last_force_unlock_timestamp_seconds", namespace=NS, kind=M, name="web")
    assert ts is not None and abs(ts - time.time()) < 120, ts


def test_series_count_increase_counts_again(kube: KubeEmulator, exporter: Exporter) -> None:
    kube.create(terraform_object(M, NS, "web"))
    ev = force_unlock_event(NS, M, "web", "captf-m-web-apply-a2-abc123", event_name="web.force1")
    kube.create(ev)
    wait_samples(exporter, [total("web", 1)], 20, "the Event counted once")
    # the same Job's repeat comes back as a series on the same Event: 2 occurrences in all
    later = now_utc().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.patch("events", NS, "web.force1", {"series": {"count": 2, "lastObservedTime": later}})
    wait_samples(exporter, [total("web", 2)], 20, "series.count 2 counted as one more")
    kube.patch("events", NS, "web.force1", {"series": {"count": 3, "lastObservedTime": later}})
    wait_samples(exporter, [total("web", 3)], 20, "series.count 3 counted as one more")
    # an update that does not increase the count does not count; a later Event of another object,
    # delivered on the same watch stream, shows that the update was processed
    kube.patch("events", NS, "web.force1", {"note": "Job x force-unlocks a stale state lock (edited)"})
    kube.create(terraform_object(M, NS, "marker"))
    kube.create(force_unlock_event(NS, M, "marker", "captf-m-marker-apply-a1-cccccc"))
    m = wait_samples(exporter, [total("marker", 1)], 20, "the marker Event counted")
    assert m.get("captf_state_lock_force_unlocks_total", namespace=NS, kind=M, name="web") == 3


def test_preexisting_events_are_not_counted(kube: KubeEmulator, start_exporter: Callable[..., Exporter]) -> None:
    kube.create(terraform_object(M, NS, "web"))
    an_hour_ago = now_utc() - dt.timedelta(hours=1)
    kube.create(force_unlock_event(NS, M, "web", "captf-m-web-apply-a1-abc123", event_time=an_hour_ago))
    exp = start_exporter()
    # an Event that existed at start is not counted but still sets the last-seen timestamp
    m = wait_samples(exp, [
        total("web", 0),
        E("captf_state_lock_last_force_unlock_timestamp_seconds", PRESENT, namespace=NS, kind=M, name="web"),
    ], 20, "the counter at 0 despite the old Event, and its timestamp set")
    ts = m.get("captf_state_lock_last_force_unlock_timestamp_seconds", namespace=NS, kind=M, name="web")
    assert ts <= time.time() + 5, ts
    # ... and the counter still counts what comes later
    kube.create(force_unlock_event(NS, M, "web", "captf-m-web-apply-a2-def456"))
    wait_samples(exp, [total("web", 1)], 20, "a new Event after start counted")
