"""Holder classes, per-lock series, released locks, locks of objects the exporter does not know."""

from __future__ import annotations

import datetime as dt
import json
from typing import Callable

import pytest

from pykit.builders import (
    LOCK_INFO_ANNOTATION,
    lease,
    lease_name,
    lock_info_doc,
    lock_lease,
    now_utc,
    pod,
    runner_pod_name,
    state_suffix,
    terraform_object,
)
from pykit.exporter import E, Exporter, wait_samples
from pykit.kube import KubeEmulator

NS = "team-a"
M = "TerraformMachine"


def lock_labels(name: str, kind: str = M, ns: str = NS) -> dict[str, str]:
    return {"namespace": ns, "kind": kind, "name": name}


def info_of(name: str, cls: str, kind: str = M, ns: str = NS):
    return E("captf_state_lock_info", 1, **lock_labels(name, kind, ns), **{"class": cls})


def build_class_scenario(kube: KubeEmulator) -> dict[str, object]:
    """Objects, pods and locks covering every class but own_unverified.  Returns facts to assert."""
    created_90s = now_utc() - dt.timedelta(seconds=90)
    facts: dict[str, object] = {}

    names = ["live", "live-term", "live-pending", "stale", "stale-done", "foreign", "foreign-other",
             "unknown-type", "unknown-noat", "unknown-nohost", "unknown-missing", "unknown-garbage", "free"]
    for n in names:
        kube.create(terraform_object(M, NS, n))

    # own_live: the holder pod runs, is pending, or is terminating (a terminating pod is alive)
    p_live = runner_pod_name(M, "live")
    kube.create(pod(NS, p_live, "Running", kind=M, owner="live"))
    kube.create(lock_lease(NS, M, "live", who=f"root@{p_live}"))
    p_term = runner_pod_name(M, "live-term", "destroy", 2)
    kube.create(pod(NS, p_term, "Running", deleting=True, kind=M, owner="live-term"))
    kube.create(lock_lease(NS, M, "live-term", who=f"root@{p_term}", operation="OperationTypeApply"))
    p_pend = runner_pod_name(M, "live-pending", "plan", 1)
    kube.create(pod(NS, p_pend, "Pending", kind=M, owner="live-pending"))
    kube.create(lock_lease(NS, M, "live-pending", who=f"@{p_pend}"))

    # own_stale: the holder pod is gone, or Succeeded
    kube.create(lock_lease(NS, M, "stale", who=f"@{runner_pod_name(M, 'stale', 'apply', 7)}"))
    p_done = runner_pod_name(M, "stale-done", "refresh", 1)
    kube.create(pod(NS, p_done, "Succeeded", kind=M, owner="stale-done"))
    kube.create(lock_lease(NS, M, "stale-done", who=f"root@{p_done}"))

    # foreign: a workstation; another object's (running) runner pod
    info = lock_info_doc("alice@laptop", created=created_90s, operation="OperationTypePlan", version="1.9.8")
    facts["foreign_info"] = info
    facts["foreign_created"] = created_90s
    kube.create(lock_lease(NS, M, "foreign", lock_info=info))
    kube.create(lock_lease(NS, M, "foreign-other", who=f"root@{p_live}"))

    # unknown: wrong type, no '@', nothing after '@', no lock-info at all, not JSON
    kube.create(lease(NS, state_suffix(NS, M, "unknown-type"), holder_identity="hid-1",
                      lock_info=json.dumps({"Who": 5}), owner_kind=M, owner_name="unknown-type"))
    kube.create(lock_lease(NS, M, "unknown-noat", who="laptop"))
    kube.create(lock_lease(NS, M, "unknown-nohost", who="alice@"))
    kube.create(lease(NS, state_suffix(NS, M, "unknown-missing"), holder_identity="hid-2",
                      owner_kind=M, owner_name="unknown-missing"))
    kube.create(lease(NS, state_suffix(NS, M, "unknown-garbage"), holder_identity="hid-3",
                      lock_info="\x00not json{", owner_kind=M, owner_name="unknown-garbage"))

    # an unlocked object's lease, and CAPTF's non-lock leases (captf.io/lease): none is a held lock
    kube.create(lease(NS, state_suffix(NS, M, "free"), owner_kind=M, owner_name="free"))
    kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": f"captf-run-{state_suffix(NS, M, 'free')}", "namespace": NS,
                              "labels": {"captf.io/lease": "run", "captf.io/managed": "true"}},
                 "spec": {"holderIdentity": "captf-m-free-apply-a1-abc123"}})
    kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "captf-cluster-0123456789abcdef", "namespace": NS,
                              "labels": {"captf.io/lease": "cluster"}},
                 "spec": {"holderIdentity": "captf-c-cl-apply-a1-abc123"}})
    return facts


EXPECTED_CLASSES = {
    "live": "own_live", "live-term": "own_live", "live-pending": "own_live",
    "stale": "own_stale", "stale-done": "own_stale",
    "foreign": "foreign", "foreign-other": "foreign",
    "unknown-type": "unknown", "unknown-noat": "unknown", "unknown-nohost": "unknown",
    "unknown-missing": "unknown", "unknown-garbage": "unknown",
}


@pytest.mark.parametrize("when", ["objects_before_start", "objects_after_start"])
def test_every_class_is_reported(kube: KubeEmulator, start_exporter: Callable[..., Exporter], when: str) -> None:
    if when == "objects_before_start":
        facts = build_class_scenario(kube)
        exp = start_exporter()
    else:
        exp = start_exporter()
        facts = build_class_scenario(kube)

    expects = [info_of(n, c) for n, c in EXPECTED_CLASSES.items()]
    expects += [E("captf_state_lock_held", 1, **lock_labels(n)) for n in EXPECTED_CLASSES]
    expects += [E("captf_state_lock_held", 0, **lock_labels("free"))]
    counts = {c: sum(1 for v in EXPECTED_CLASSES.values() if v == c)
              for c in ("own_live", "own_stale", "foreign", "unknown", "own_unverified")}
    expects += [E("captf_state_locks_held", v, **{"class": c}) for c, v in counts.items()]
    m = wait_samples(exp, expects, 20, "every lock classified")

    # exactly one class, i.e. one info series, per held lock; none for the unlocked object
    for n in EXPECTED_CLASSES:
        assert len(m.all("captf_state_lock_info", **lock_labels(n))) == 1, m.all("captf_state_lock_info", name=n)
    assert m.all("captf_state_lock_info", name="free") == []
    assert len(m.all("captf_state_lock_info")) == len(EXPECTED_CLASSES), m.all("captf_state_lock_info")

    # the info labels of the foreign lock come from its lock-info
    info = facts["foreign_info"]
    lbl = m.labels("captf_state_lock_info", **lock_labels("foreign"))
    assert lbl is not None
    assert lbl["holder"] == "alice@laptop"
    assert lbl["lock_id"] == info["ID"]
    assert lbl["operation"] == "OperationTypePlan"
    assert lbl["version"] == "1.9.8"
    # lock ID falls back to holderIdentity when lock-info is unusable
    assert m.labels("captf_state_lock_info", **lock_labels("unknown-missing"))["lock_id"] == "hid-2"

    # age and Created of a lock with usable lock-info
    created: dt.datetime = facts["foreign_created"]
    assert m.get("captf_state_lock_created_timestamp_seconds", **lock_labels("foreign")) == \
        pytest.approx(created.timestamp(), abs=0.01)
    acquired = m.get("captf_state_lock_acquired_timestamp_seconds", **lock_labels("foreign"), age_source="lock_info")
    assert acquired == pytest.approx(created.timestamp(), abs=0.01), \
        m.all("captf_state_lock_acquired_timestamp_seconds", name="foreign")
    assert m.get("captf_state_lock_overdue", **lock_labels("foreign"), **{"class": "foreign"}) == 0

    # unusable lock-info: age is observed, there is no Created series
    for n in ("unknown-type", "unknown-missing", "unknown-garbage"):
        assert m.labels("captf_state_lock_acquired_timestamp_seconds", **lock_labels(n)) is not None, n
        assert m.labels("captf_state_lock_acquired_timestamp_seconds", **lock_labels(n))["age_source"] == "observed", n
        assert m.get("captf_state_lock_created_timestamp_seconds", **lock_labels(n)) is None, n


def test_released_lock_series_disappear(kube: KubeEmulator, exporter: Exporter) -> None:
    kube.create(terraform_object(M, NS, "web"))
    kube.create(terraform_object(M, NS, "other"))
    info = lock_info_doc("alice@laptop", created=now_utc() - dt.timedelta(seconds=30))
    kube.create(lock_lease(NS, M, "web", lock_info=info))
    kube.create(lock_lease(NS, M, "other", who="bob@desk"))
    wait_samples(exporter, [
        info_of("web", "foreign"),
        E("captf_state_lock_held", 1, **lock_labels("web")),
        E("captf_state_locks_held", 2, **{"class": "foreign"}),
    ], 20, "both locks held")

    kube.release_lock(NS, lease_name(state_suffix(NS, M, "web")))
    # the Lease stays: it is only released
    assert kube.get("leases", NS, lease_name(state_suffix(NS, M, "web"))).status_code == 200

    m = wait_samples(exporter, [
        E("captf_state_lock_held", 0, **lock_labels("web")),
        E("captf_state_locks_held", 1, **{"class": "foreign"}),
    ], 20, "the lock of web released")
    for name in ("captf_state_lock_info", "captf_state_lock_acquired_timestamp_seconds", "captf_state_lock_overdue",
                 "captf_state_lock_created_timestamp_seconds"):
        assert m.all(name, **lock_labels("web")) == [], (name, m.all(name, **lock_labels("web")))
        assert m.all(name, **lock_labels("other")) != [], (name, "the other lock must stay")
    assert m.get("captf_state_lock_held", **lock_labels("other")) == 1

    # taken again: the series come back
    kube.patch("leases", NS, lease_name(state_suffix(NS, M, "web")), {
        "metadata": {"annotations": {LOCK_INFO_ANNOTATION: json.dumps(lock_info_doc("carol@ws"))}},
        "spec": {"holderIdentity": "again"},
    })
    wait_samples(exporter, [info_of("web", "foreign"), E("captf_state_lock_held", 1, **lock_labels("web"))],
                 20, "web locked again")


def test_lock_of_unknown_object_uses_lease_labels(kube: KubeEmulator, exporter: Exporter) -> None:
    # no TerraformMachine "ghost" and no TerraformMachinePool "ghost-pool" exist (deleted with Retain)
    kube.create(lock_lease(NS, M, "ghost", who="alice@laptop"))
    kube.create(lock_lease(NS, "TerraformMachinePool", "ghost-pool", who="bob@desk"))
    kube.create(lock_lease("team-b", "TerraformCluster", "ghost-cl", lock_info=json.dumps({"Who": 5}),
                           holder_identity="hid"))
    wait_samples(exporter, [
        info_of("ghost", "foreign"),
        info_of("ghost-pool", "foreign", kind="TerraformMachinePool"),
        info_of("ghost-cl", "unknown", kind="TerraformCluster", ns="team-b"),
        E("captf_state_locks_held", 2, **{"class": "foreign"}),
        E("captf_state_locks_held", 1, **{"class": "unknown"}),
    ], 20, "locks of unknown objects reported with kind/name from their labels")


def test_long_object_name_is_joined_by_computed_suffix(kube: KubeEmulator, exporter: Exporter) -> None:
    # the owner-name label of a name longer than 63 characters is a hash; the name comes from the object
    long_name = "machine-" + "x" * 62
    assert len(long_name) > 63
    kube.create(terraform_object(M, NS, long_name))
    kube.create(lock_lease(NS, M, long_name, who="alice@laptop"))
    m = wait_samples(exporter, [info_of(long_name, "foreign"),
                                E("captf_state_lock_held", 1, **lock_labels(long_name))],
                     20, "the lock of the long-named machine")
    assert len(m.all("captf_state_lock_info")) == 1, m.all("captf_state_lock_info")


def test_untrusted_lock_info_keeps_the_exposition_valid(kube: KubeEmulator, exporter: Exporter) -> None:
    """lock-info is written by runner ServiceAccounts: any size, any characters (docs/contract.md 2.4)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    huge_who = "mallory@" + "x" * 100_000
    odd_who = 'eve"} 1\n# EOF\nfake_metric{a="b\\\\@ws\u00e9\u2603\t'
    kube.create(terraform_object(M, NS, "huge"))
    kube.create(terraform_object(M, NS, "odd"))
    kube.create(lock_lease(NS, M, "huge", lock_info=lock_info_doc(huge_who, info="i" * 50_000,
                                                                   operation="o" * 10_000)))
    kube.create(lock_lease(NS, M, "odd", lock_info=lock_info_doc(odd_who, version='1.9"\n')))
    m = wait_samples(exporter, [info_of("huge", "foreign"), info_of("odd", "foreign"),
                                E("captf_state_locks_held", 2, **{"class": "foreign"})],
                     20, "both hostile locks classified foreign")
    holder = m.labels("captf_state_lock_info", **lock_labels("huge"))["holder"]
    # capped (docs/contract.md 7.5: 128 bytes, escaped; assert only a sane bound)
    assert holder.startswith("mallory") and len(holder.encode()) <= 1024, (len(holder), holder[:80])
    assert "fake_metric" not in m.names()
    # the OpenMetrics exposition parses too, with the same single info series per lock
    text = exporter.get("/metrics").text
    fams = {f.name: f for f in parse_openmetrics(text)}
    assert "fake_metric" not in fams
    infos = [s for s in fams["captf_state_lock_info"].samples if s.labels.get("name") in ("huge", "odd")]
    assert len(infos) == 2, infos
