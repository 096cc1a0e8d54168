"""captf_state_lock_overdue: 1 for a foreign/unknown lock older than its effective lockTimeoutSeconds."""

from __future__ import annotations

import json
import time

import datetime as dt

from pykit.builders import lease_name, lock_lease, now_utc, runner_pod_name, state_suffix, terraform_object
from pykit.exporter import E, PRESENT, Exporter, wait_samples
from pykit.kube import KubeEmulator
from pykit.net import wait_for

NS = "team-a"
M = "TerraformMachine"


def overdue(name: str, cls: str, value: float | None):
    return E("captf_state_lock_overdue", value, namespace=NS, kind=M, name=name, **{"class": cls})


def test_overdue_against_effective_timeout(kube: KubeEmulator, exporter: Exporter) -> None:
    two_hours_ago = now_utc() - dt.timedelta(hours=2)
    half_hour_ago = now_utc() - dt.timedelta(minutes=30)
    objs = {
        "old-foreign": None,                       # 300 s default, 2 h old -> overdue
        "young-foreign": None,                     # just taken -> not overdue
        "old-unknown": None,                       # Who without '@' but a usable Created -> overdue
        "old-stale": None,                         # own_stale is never overdue
        "long-timeout-old": {"lockTimeoutSeconds": 3600},    # 2 h > 1 h -> overdue
        "long-timeout-young": {"lockTimeoutSeconds": 3600},  # 30 min < 1 h -> not overdue
        "future": None,                            # Created an hour ahead (a fast clock): age since first seen
    }
    for n, jobs in objs.items():
        kube.create(terraform_object(M, NS, n, jobs=jobs))
    kube.create(lock_lease(NS, M, "old-foreign", who="alice@laptop", created=two_hours_ago))
    kube.create(lock_lease(NS, M, "young-foreign", who="alice@laptop"))
    kube.create(lock_lease(NS, M, "old-unknown", who="laptop", created=two_hours_ago))
    kube.create(lock_lease(NS, M, "old-stale", who=f"root@{runner_pod_name(M, 'old-stale')}",
                           created=two_hours_ago))
    kube.create(lock_lease(NS, M, "long-timeout-old", who="alice@laptop", created=two_hours_ago))
    kube.create(lock_lease(NS, M, "long-timeout-young", who="alice@laptop", created=half_hour_ago))
    kube.create(lock_lease(NS, M, "future", who="alice@laptop", created=now_utc() + dt.timedelta(hours=1)))

    m = wait_samples(exporter, [
        overdue("old-foreign", "foreign", 1),
        overdue("young-foreign", "foreign", 0),
        overdue("old-unknown", "unknown", 1),
        overdue("old-stale", "own_stale", 0),
        overdue("long-timeout-old", "foreign", 1),
        overdue("long-timeout-young", "foreign", 0),
        overdue("future", "foreign", 0),
        E("captf_state_lock_acquired_timestamp_seconds", PRESENT, namespace=NS, kind=M, name="future",
          age_source="observed"),
    ], 20, "overdue flags")
    # A foreign lock's age is at least the time it has been seen (docs/contract.md section 4).
    # The exposition says when (acquired_timestamp_seconds), not how long ago: the age is now - that.
    acquired = m.get("captf_state_lock_acquired_timestamp_seconds", namespace=NS, kind=M, name="future",
                     age_source="observed")
    assert acquired is not None and 0 <= time.time() - acquired < 60, acquired
    acquired = m.get("captf_state_lock_acquired_timestamp_seconds", namespace=NS, kind=M, name="old-foreign")
    assert acquired is not None and 7200 - 5 <= time.time() - acquired <= 7200 + 120, acquired


def test_lock_becomes_overdue_without_any_api_change(kube: KubeEmulator, exporter: Exporter) -> None:
    # overdue is a function of time: with a 3 s timeout a fresh foreign lock turns overdue by itself
    kube.create(terraform_object(M, NS, "quick", jobs={"lockTimeoutSeconds": 3}))
    kube.create(lock_lease(NS, M, "quick", who="alice@laptop"))
    wait_samples(exporter, [overdue("quick", "foreign", 0)], 20, "the fresh lock, not yet overdue")
    wait_samples(exporter, [overdue("quick", "foreign", 1)], 15, "the lock overdue after its 3 s timeout")


def test_a_start_with_locks_held_logs_a_summary_and_judges_timeouts_once_listed(
        kube: KubeEmulator, start_exporter) -> None:
    """Locks already held when the exporter starts: no "class changed" line per lock (nothing changed),
    one summary line at readiness, and the overdue warning only for the lock its object's timeout makes
    overdue, once: a lock whose TerraformMachine gives it an hour is never judged against the 300 s
    default, whichever watch lists first. A change after the start is logged."""
    two_hours_ago = now_utc() - dt.timedelta(hours=2)
    ten_minutes_ago = now_utc() - dt.timedelta(minutes=10)
    kube.create(terraform_object(M, NS, "overdue-now"))
    kube.create(terraform_object(M, NS, "long-timeout", jobs={"lockTimeoutSeconds": 3600}))
    kube.create(terraform_object(M, NS, "runner"))
    kube.create(lock_lease(NS, M, "overdue-now", who="alice@laptop", created=two_hours_ago))
    kube.create(lock_lease(NS, M, "long-timeout", who="bob@desk", created=ten_minutes_ago))
    kube.create(lock_lease(NS, M, "runner", who=f"root@{runner_pod_name(M, 'runner')}", created=two_hours_ago))
    exp = start_exporter()
    wait_samples(exp, [overdue("overdue-now", "foreign", 1), overdue("long-timeout", "foreign", 0)], 20,
                 "overdue by its object's timeout only")

    def logged(text: str) -> list[dict]:
        return [l for l in exp.json_logs() if text in json.dumps(l)]
    summary = wait_for(lambda: logged("ready: every watch has listed"), 15, "the start's summary line")
    assert len(summary) == 1, summary
    fields = summary[0]
    # the runner's lock is own_stale once the live read has found no pod, own_unverified until then
    assert (fields.get("held"), fields.get("foreign")) == (3, 2), fields
    assert fields.get("own_stale", 0) + fields.get("own_unverified", 0) == 1, fields
    warned = wait_for(lambda: [l for l in logged("overdue") if l.get("level", "").upper() == "WARN"], 15,
                      "the overdue warning")
    assert len(warned) == 1 and "overdue-now" in json.dumps(warned[0]), warned
    # A lock found held is no change from "released"; the runner's lock may log the live read's
    # verdict (own_unverified to own_stale), a change made after the start.
    from_released = [l for l in logged("holder class changed") if l.get("from") == "released"]
    assert from_released == [], "a lock found held at start is not a change"

    kube.release_lock(NS, lease_name(state_suffix(NS, M, "overdue-now")))
    changed = wait_for(lambda: [l for l in logged("holder class changed") if l.get("name") == "overdue-now"], 15,
                       "the release logged as a change")
    assert len(changed) == 1 and (changed[0]["from"], changed[0]["to"]) == ("foreign", "released"), changed
    assert len([l for l in logged("overdue") if l.get("level", "").upper() == "WARN"]) == 1
