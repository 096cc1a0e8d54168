"""ForceUnlocked Events as CAPTF's recorder (client-go tools/events, events.k8s.io/v1) writes them:
named <regarding>.<hex nanos>, regarding the Terraform* object, related the Job, a series added by a
strategic-merge PATCH on a repeat (docs/contract.md section 6)."""

from __future__ import annotations

import datetime as dt
import json
import time

from pykit.builders import force_unlock_event, now_utc, terraform_object
from pykit.controlplane import Kube
from pykit.exporter import E, PRESENT, Exporter, wait_samples

M = "TerraformMachine"


def total(ns: str, name: str, value, kind: str = M):
    return E("captf_state_lock_force_unlocks_total", value, namespace=ns, kind=kind, name=name)


def recorder_event(ns: str, name: str, job: str, kind: str = M, when: dt.datetime | None = None) -> dict:
    when = when or now_utc()
    ev = force_unlock_event(ns, kind, name, job, event_time=when,
                            event_name=f"{name}.{int(when.timestamp() * 1e9):x}")
    ev["metadata"].pop("uid")
    return ev


def series_patch(kube: Kube, ns: str, name: str, count: int) -> dict:
    now = now_utc().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return kube.request("PATCH", kube.path("events", ns, name), data=json.dumps(
        {"series": {"count": count, "lastObservedTime": now}}),
        headers={"Content-Type": "application/strategic-merge-patch+json"}).json()


def test_force_unlock_events_and_series(kube: Kube, ns: str, start_exporter) -> None:
    kube.create(terraform_object(M, ns, "web"))
    kube.create(terraform_object(M, ns, "db"))
    old = kube.create(recorder_event(ns, "db", "captf-m-db-apply-a1-abc123", when=now_utc() - dt.timedelta(hours=1)))
    exp = start_exporter()
    wait_samples(exp, [total(ns, "web", 0), total(ns, "db", 0),
                       E("captf_state_lock_last_force_unlock_timestamp_seconds", PRESENT, namespace=ns, kind=M,
                         name="db")], 30, "counters at 0; the Event that existed at start is history")
    ev = kube.create(recorder_event(ns, "web", "captf-m-web-apply-a2-abc123"))
    assert ev["regarding"]["kind"] == M and ev["related"]["kind"] == "Job"
    wait_samples(exp, [total(ns, "web", 1), total(ns, "db", 0)], 30, "the first force-unlock of web")
    kube.create(recorder_event(ns, "web", "captf-m-web-apply-a3-def456"))
    wait_samples(exp, [total(ns, "web", 2)], 30, "a second Job, a second Event")
    patched = series_patch(kube, ns, ev["metadata"]["name"], 2)
    assert patched["series"]["count"] == 2
    wait_samples(exp, [total(ns, "web", 3)], 30, "series.count 2 on the first Event: one more")
    series_patch(kube, ns, ev["metadata"]["name"], 3)
    wait_samples(exp, [total(ns, "web", 4)], 30, "series.count 3: one more")
    # an Event of another reason does not count
    other = recorder_event(ns, "web", "captf-m-web-apply-a4-aaaaaa")
    other["reason"] = "StateLocked"
    other["action"] = "Reconcile"
    kube.create(other)
    kube.create(recorder_event(ns, "db", "captf-m-db-apply-a2-bbbbbb"))
    m = wait_samples(exp, [total(ns, "db", 1)], 30, "the marker Event of db counted")
    assert m.get("captf_state_lock_force_unlocks_total", namespace=ns, kind=M, name="web") == 4
    ts = m.get("captf_state_lock_last_force_unlock_timestamp_seconds", namespace=ns, kind=M, name="web")
    assert ts is not None and abs(ts - time.time()) < 120, ts
    assert old["metadata"]["name"].startswith("db.")
