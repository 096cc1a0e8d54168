"""Every holder class on a real API server (docs/contract.md section 3): pods whose phase is set
through pods/status, a pod deleted while its lock is held, a terminating pod kept by a finalizer,
workstation and other-object holders, malformed lock-info, own_unverified when the exporter may not
read pods, and names at the 57-byte boundary of CAPTF's Job names."""

from __future__ import annotations

import datetime as dt
import json
from typing import Callable

import pytest

from pykit.builders import (
    job_name,
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
from pykit.controlplane import Kube
from pykit.exporter import E, Exporter, wait_samples

M = "TerraformMachine"
CLASSES = ("own_live", "own_stale", "foreign", "unknown", "own_unverified")


def info_of(ns: str, name: str, cls: str, kind: str = M):
    return E("captf_state_lock_info", 1, namespace=ns, kind=kind, name=name, **{"class": cls})


def build_class_scenario(kube: Kube, ns: str) -> dict[str, object]:
    """The integration suite's class scenario (tests/integration/test_classes.py) written through a
    real API server: pod phases go through pods/status, the terminating pod is a DELETE of a pod
    with a finalizer.  Adds a pod in phase Failed."""
    created_90s = now_utc() - dt.timedelta(seconds=90)
    facts: dict[str, object] = {}
    for n in ["live", "live-term", "live-pending", "stale", "stale-done", "stale-failed", "foreign",
              "foreign-other", "unknown-type", "unknown-noat", "unknown-nohost", "unknown-missing",
              "unknown-garbage", "free"]:
        kube.create(terraform_object(M, ns, n))

    p_live = runner_pod_name(M, "live")
    kube.create(pod(ns, p_live, "Running", kind=M, owner="live"))
    kube.create(lock_lease(ns, M, "live", who=f"root@{p_live}"))
    p_term = runner_pod_name(M, "live-term", "destroy", 2)
    kube.create(pod(ns, p_term, "Running", deleting=True, kind=M, owner="live-term"))
    term = kube.get_obj("pods", ns, p_term)
    assert term["metadata"].get("deletionTimestamp"), "the terminating pod must carry a deletionTimestamp"
    kube.create(lock_lease(ns, M, "live-term", who=f"root@{p_term}"))
    p_pend = runner_pod_name(M, "live-pending", "plan", 1)
    kube.create(pod(ns, p_pend, "Pending", kind=M, owner="live-pending"))
    kube.create(lock_lease(ns, M, "live-pending", who=f"@{p_pend}"))

    kube.create(lock_lease(ns, M, "stale", who=f"@{runner_pod_name(M, 'stale', 'apply', 7)}"))
    p_done = runner_pod_name(M, "stale-done", "refresh", 1)
    kube.create(pod(ns, p_done, "Succeeded", kind=M, owner="stale-done"))
    assert kube.get_obj("pods", ns, p_done)["status"]["phase"] == "Succeeded"
    kube.create(lock_lease(ns, M, "stale-done", who=f"root@{p_done}"))
    p_failed = runner_pod_name(M, "stale-failed", "apply", 2)
    kube.create(pod(ns, p_failed, "Failed", kind=M, owner="stale-failed"))
    kube.create(lock_lease(ns, M, "stale-failed", who=f"root@{p_failed}"))

    info = lock_info_doc("alice@laptop", created=created_90s, operation="OperationTypePlan", version="1.9.8")
    facts["foreign_info"] = info
    facts["foreign_created"] = created_90s
    kube.create(lock_lease(ns, M, "foreign", lock_info=info))
    kube.create(lock_lease(ns, M, "foreign-other", who=f"root@{p_live}"))

    kube.create(lease(ns, state_suffix(ns, M, "unknown-type"), holder_identity="hid-1",
                      lock_info=json.dumps({"Who": 5}), owner_kind=M, owner_name="unknown-type"))
    kube.create(lock_lease(ns, M, "unknown-noat", who="laptop"))
    kube.create(lock_lease(ns, M, "unknown-nohost", who="alice@"))
    kube.create(lease(ns, state_suffix(ns, M, "unknown-missing"), holder_identity="hid-2",
                      owner_kind=M, owner_name="unknown-missing"))
    kube.create(lease(ns, state_suffix(ns, M, "unknown-garbage"), holder_identity="hid-3",
                      lock_info="\x01not json{", owner_kind=M, owner_name="unknown-garbage"))

    kube.create(lease(ns, state_suffix(ns, M, "free"), owner_kind=M, owner_name="free"))
    kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": f"captf-run-{state_suffix(ns, M, 'free')}", "namespace": ns,
                              "labels": {"captf.io/lease": "run", "captf.io/managed": "true"}},
                 "spec": {"holderIdentity": "captf-m-free-apply-a1-abc123"}})
    return facts


EXPECTED_CLASSES = {
    "live": "own_live", "live-term": "own_live", "live-pending": "own_live",
    "stale": "own_stale", "stale-done": "own_stale", "stale-failed": "own_stale",
    "foreign": "foreign", "foreign-other": "foreign",
    "unknown-type": "unknown", "unknown-noat": "unknown", "unknown-nohost": "unknown",
    "unknown-missing": "unknown", "unknown-garbage": "unknown",
}


def class_expectations(ns: str, idle_objects: bool = True) -> list:
    """Every class of the scenario on /metrics; the released lock's object shows held 0 with
    --export-idle-objects and has no series without it (the chart's default)."""
    expects = [info_of(ns, n, c) for n, c in EXPECTED_CLASSES.items()]
    expects += [E("captf_state_lock_held", 1, namespace=ns, kind=M, name=n) for n in EXPECTED_CLASSES]
    expects += [E("captf_state_lock_held", 0 if idle_objects else None, namespace=ns, kind=M, name="free")]
    counts = {c: sum(1 for v in EXPECTED_CLASSES.values() if v == c) for c in CLASSES}
    expects += [E("captf_state_locks_held", v, **{"class": c}) for c, v in counts.items()]
    return expects


@pytest.mark.parametrize("when", ["objects_before_start", "objects_after_start"])
def test_every_class_on_a_real_server(kube: Kube, ns: str, start_exporter: Callable[..., Exporter], when: str) -> None:
    if when == "objects_before_start":
        facts = build_class_scenario(kube, ns)
        exp = start_exporter()
    else:
        exp = start_exporter()
        facts = build_class_scenario(kube, ns)
    m = wait_samples(exp, class_expectations(ns), 30, "every lock classified")
    assert len(m.all("captf_state_lock_info", namespace=ns)) == len(EXPECTED_CLASSES)
    lbl = m.labels("captf_state_lock_info", namespace=ns, kind=M, name="foreign")
    info = facts["foreign_info"]
    assert (lbl["holder"], lbl["lock_id"], lbl["operation"], lbl["version"]) == \
        ("alice@laptop", info["ID"], "OperationTypePlan", "1.9.8")
    assert m.labels("captf_state_lock_info", namespace=ns, kind=M, name="unknown-missing")["lock_id"] == "hid-2"
    created: dt.datetime = facts["foreign_created"]
    assert m.get("captf_state_lock_created_timestamp_seconds", namespace=ns, kind=M, name="foreign") == \
        pytest.approx(created.timestamp(), abs=0.01)
    for n in ("unknown-type", "unknown-missing", "unknown-garbage"):
        assert m.labels("captf_state_lock_acquired_timestamp_seconds", namespace=ns, kind=M,
                        name=n)["age_source"] == "observed"
    # the gone pod's stale verdict was confirmed by a live read (a terminal phase in the watch cache
    # is final and needs none: crates/captf-index/src/pods.rs)
    assert m.get("captf_lock_exporter_pod_reads_total", result="not_found") >= 1


def test_pod_transitions_through_the_status_subresource(kube: Kube, ns: str, exporter: Exporter) -> None:
    """own_live -> own_stale when the runner's phase becomes Failed (pods/status), and when the
    pod is deleted; a new lock of the same object starts fresh."""
    kube.create(terraform_object(M, ns, "web"))
    kube.create(terraform_object(M, ns, "db"))
    p_web = runner_pod_name(M, "web", "apply", 1)
    p_db = runner_pod_name(M, "db", "apply", 1)
    kube.create(pod(ns, p_web, "Running", kind=M, owner="web"))
    kube.create(pod(ns, p_db, "Running", kind=M, owner="db"))
    kube.create(lock_lease(ns, M, "web", who=f"root@{p_web}"))
    kube.create(lock_lease(ns, M, "db", who=f"root@{p_db}"))
    wait_samples(exp := exporter, [info_of(ns, "web", "own_live"), info_of(ns, "db", "own_live")], 30, "both live")

    kube.set_pod_phase(ns, p_web, "Failed")
    wait_samples(exp, [info_of(ns, "web", "own_stale"), info_of(ns, "db", "own_live")], 30,
                 "web's runner Failed -> own_stale")
    kube.delete("pods", ns, p_db)
    assert kube.get(kube.path("pods", ns, p_db)).status_code == 404, "a pod with no node is deleted at once"
    wait_samples(exp, [info_of(ns, "db", "own_stale")], 30, "db's runner deleted -> own_stale")

    # the next Job force-unlocks and takes the lock again with a new pod
    p_web2 = runner_pod_name(M, "web", "apply", 2, hash6="def456")
    kube.create(pod(ns, p_web2, "Running", kind=M, owner="web"))
    kube.patch("leases", ns, lease_name(state_suffix(ns, M, "web")), {
        "metadata": {"annotations": {"app.terraform.io/lock-info": json.dumps(lock_info_doc(f"root@{p_web2}"))}},
        "spec": {"holderIdentity": "new-id"}})
    wait_samples(exp, [info_of(ns, "web", "own_live")], 30, "web locked again by its new runner")


def test_57_byte_job_name_boundary(kube: Kube, ns: str, exporter: Exporter) -> None:
    """docs/contract.md 2.6: a Job name of exactly 57 bytes keeps the object name, 58 hashes it."""
    at = "a" * 33      # captf-m-<33>-apply-a1-abc123 = 57 bytes
    over = "b" * 34    # 58 bytes -> the name part becomes sha256(name)[:16]
    assert len(job_name("m", at).encode()) == 57 and at in job_name("m", at)
    assert over not in job_name("m", over) and len(job_name("m", over).encode()) < 57
    for n in (at, over, "c" * 34):
        kube.create(terraform_object(M, ns, n))
    p_at, p_over = runner_pod_name(M, at), runner_pod_name(M, over)
    kube.create(pod(ns, p_at, "Running", kind=M, owner=at))
    kube.create(pod(ns, p_over, "Running", kind=M, owner=over))
    kube.create(lock_lease(ns, M, at, who=f"root@{p_at}"))
    kube.create(lock_lease(ns, M, over, who=f"root@{p_over}"))
    # a look-alike: the 58-byte Job name left unhashed is not CAPTF's name, so not an own pod
    lookalike = f"captf-m-{'c' * 34}-apply-a1-abc123-x7k2p"
    kube.create(pod(ns, lookalike, "Running", kind=M, owner="c" * 34))
    kube.create(lock_lease(ns, M, "c" * 34, who=f"root@{lookalike}"))
    wait_samples(exporter, [info_of(ns, at, "own_live"), info_of(ns, over, "own_live"),
                            info_of(ns, "c" * 34, "foreign")], 30, "57-byte boundary")


def test_own_unverified_when_pod_reads_are_refused(kube: Kube, ns: str, namespace_factory,
                                                   start_exporter: Callable[..., Exporter]) -> None:
    """With list/watch but no get on pods, a lock whose own runner pod is not in the watch cache
    cannot be confirmed stale: own_unverified, and pod_reads_total{result=error} counts."""
    from conftest import install_chart
    values = {"fullnameOverride": "exporter-nopodget"}
    inst = install_chart(kube, values, name="nopodget")
    role = inst.read_role()
    for rule in role["rules"]:
        if "pods" in rule.get("resources", []):
            rest = [r for r in rule["resources"] if r != "pods"]
            rule["resources"] = rest
    role["rules"] = [r for r in role["rules"] if r.get("resources")]
    role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]})
    kube.apply(role)
    kube.create(terraform_object(M, ns, "gone"))
    kube.create(lock_lease(ns, M, "gone", who=f"root@{runner_pod_name(M, 'gone')}"))
    exp = start_exporter(token=inst.token)
    m = wait_samples(exp, [info_of(ns, "gone", "own_unverified"),
                           E("captf_lock_exporter_watch_up", 1, resource="pods")], 30,
                     "own_unverified when the pod GET is refused")
    assert m.get("captf_lock_exporter_pod_reads_total", result="error") >= 1
    assert m.get("captf_lock_exporter_pod_reads_total", result="not_found") == 0
