"""Kubernetes objects written the way CAPTF and the Terraform/OpenTofu backend write them
(docs/contract.md section 2): Leases, lock-info, runner pods, Terraform* objects, CAPI Clusters,
ForceUnlocked Events; and the names CAPTF derives (state suffix, Lease, Job and pod names).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from typing import Any, Mapping

INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
INFRA_VERSION = "v1alpha1"
CAPI_GROUP = "cluster.x-k8s.io"
LABEL_PREFIX = "captf.infrastructure.cluster.x-k8s.io/"
OWNER_KIND = LABEL_PREFIX + "owner-kind"
OWNER_NAME = LABEL_PREFIX + "owner-name"
CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
LOCK_INFO_ANNOTATION = "app.terraform.io/lock-info"

KIND_SHORT = {"TerraformCluster": "c", "TerraformMachine": "m", "TerraformMachinePool": "mp"}
KIND_PLURAL = {
    "TerraformCluster": "terraformclusters",
    "TerraformMachine": "terraformmachines",
    "TerraformMachinePool": "terraformmachinepools",
}
OPS = ("apply", "destroy", "refresh", "drift", "restore", "plan")
CLASSES = ("own_live", "own_stale", "foreign", "unknown", "own_unverified")


def state_suffix(namespace: str, kind: str, name: str) -> str:
    """docs/contract.md 2.2: hex(sha256(namespace + "/" + Kind + "/" + name))[:16] + "-" + kindshort."""
    digest = hashlib.sha256(f"{namespace}/{kind}/{name}".encode()).hexdigest()[:16]
    return f"{digest}-{KIND_SHORT[kind]}"


def lease_name(suffix: str) -> str:
    return f"lock-tfstate-default-{suffix}"


def owner_name_label(name: str) -> str:
    """CAPTF's owner-name label value: the name, or sha256(name)[:16] hex when longer than 63."""
    return name if len(name) <= 63 else hashlib.sha256(name.encode()).hexdigest()[:16]


def job_name(kindshort: str, name: str, op: str = "apply", attempt: int = 1, hash6: str = "abc123") -> str:
    """internal/jobs/name.go: captf-<ks>-<name>-<op>-a<attempt>-<hash6>, name hashed past 57 bytes."""
    full = f"captf-{kindshort}-{name}-{op}-a{attempt}-{hash6}"
    if len(full.encode()) > 57:
        short = hashlib.sha256(name.encode()).hexdigest()[:16]
        full = f"captf-{kindshort}-{short}-{op}-a{attempt}-{hash6}"
    return full


def runner_pod_name(kind: str, name: str, op: str = "apply", attempt: int = 1, hash6: str = "abc123",
                    pod_suffix: str = "x7k2p") -> str:
    assert len(pod_suffix) == 5
    return f"{job_name(KIND_SHORT[kind], name, op, attempt, hash6)}-{pod_suffix}"


def rfc3339_nano(t: dt.datetime) -> str:
    """UTC RFC 3339 with nanoseconds, as Go's time.Time marshals it (e.g. 2026-09-26T15:53:38.315668626Z)."""
    t = t.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}" + "123Z"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --------------------------------------------------------------------------------------------
# Object builders
# --------------------------------------------------------------------------------------------


def lock_info_doc(who: str, *, created: dt.datetime | str | None = None, lock_id: str | None = None,
              operation: str = "OperationTypeApply", info: str = "", version: str = "1.9.8",
              path: str = "") -> dict[str, Any]:
    """The backend's lock-info document: exactly ID, Operation, Info, Who, Version, Created, Path."""
    if created is None:
        created = now_utc()
    return {
        "ID": lock_id if lock_id is not None else str(uuid.uuid4()),
        "Operation": operation,
        "Info": info,
        "Who": who,
        "Version": version,
        "Created": created if isinstance(created, str) else rfc3339_nano(created),
        "Path": path,
    }


def lease(ns: str, suffix: str, holder_identity: str | None = None,
          lock_info: Mapping[str, Any] | str | None = None, labels: Mapping[str, str] | None = None, *,
          owner_kind: str | None = None, owner_name: str | None = None, cluster_name: str | None = None,
          owner_labels: bool = True) -> dict[str, Any]:
    """A state-lock Lease ``lock-tfstate-default-<suffix>`` as the backend + CAPTF label it.

    ``lock_info`` may be a dict (JSON-encoded here, compactly, as Go does), a raw string (written
    verbatim: use it for malformed documents), or None (no annotation).  When ``lock_info`` is a
    dict and ``holder_identity`` is None, the holder is the lock ID (what the backend does).
    ``owner_kind``/``owner_name`` default from the suffix's kindshort only when given explicitly;
    pass ``owner_labels=False`` to leave CAPTF's labels off.
    """
    lbl: dict[str, str] = {
        "tfstate": "true",
        "tfstateSecretSuffix": suffix,
        "tfstateWorkspace": "default",
        "app.kubernetes.io/managed-by": "terraform",
    }
    if owner_labels:
        lbl["captf.io/managed"] = "true"
        if owner_kind is not None:
            lbl[OWNER_KIND] = owner_kind
        if owner_name is not None:
            lbl[OWNER_NAME] = owner_name_label(owner_name)
        if cluster_name is not None:
            lbl[CLUSTER_NAME] = cluster_name
    if labels:
        lbl.update(labels)
    annotations: dict[str, str] = {}
    if isinstance(lock_info, str):
        annotations[LOCK_INFO_ANNOTATION] = lock_info
    elif lock_info is not None:
        annotations[LOCK_INFO_ANNOTATION] = json.dumps(lock_info, separators=(",", ":"))
        if holder_identity is None:
            holder_identity = lock_info.get("ID") or None
    meta: dict[str, Any] = {"name": lease_name(suffix), "namespace": ns, "labels": lbl}
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {}
    if holder_identity is not None:
        spec["holderIdentity"] = holder_identity
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def lock_lease(ns: str, kind: str, name: str, *, who: str | None = None,
               lock_info: Mapping[str, Any] | str | None = None, holder_identity: str | None = None,
               cluster_name: str | None = None, created: dt.datetime | str | None = None,
               operation: str = "OperationTypeApply", owner_labels: bool = True) -> dict[str, Any]:
    """A held state lock of the Terraform object (kind, ns, name).

    Give ``who`` for a well-formed lock-info, or ``lock_info`` (dict/str) for full control.
    """
    if lock_info is None and who is not None:
        lock_info = lock_info_doc(who, created=created, operation=operation)
    return lease(ns, state_suffix(ns, kind, name), holder_identity=holder_identity, lock_info=lock_info,
                 owner_kind=kind, owner_name=name, cluster_name=cluster_name, owner_labels=owner_labels)


def pod(ns: str, name: str, phase: str = "Running", deleting: bool = False, *, kind: str | None = None,
        owner: str | None = None, op: str = "apply", attempt: int = 1) -> dict[str, Any]:
    """A runner pod labelled captf.io/managed=true.  ``deleting`` sets deletionTimestamp.

    kmock deletes an object carrying deletionTimestamp but no finalizers right after the write,
    so a terminating pod also carries a (test-only) finalizer to stay in the store.
    """
    labels = {"captf.io/managed": "true", LABEL_PREFIX + "op": op, LABEL_PREFIX + "attempt": str(attempt),
              "batch.kubernetes.io/job-name": name.rsplit("-", 1)[0]}
    if kind is not None:
        labels[OWNER_KIND] = kind
    if owner is not None:
        labels[OWNER_NAME] = owner_name_label(owner)
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels, "uid": str(uuid.uuid4()),
                            "creationTimestamp": now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")}
    if deleting:
        meta["deletionTimestamp"] = now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = 600
        meta["finalizers"] = ["captf.io/itest-hold"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"terminationGracePeriodSeconds": 600, "restartPolicy": "Never",
                 "containers": [{"name": "runner", "image": "captf-runner:test"}]},
        "status": {"phase": phase},
    }


def terraform_object(kind: str, ns: str, name: str, jobs: Mapping[str, Any] | None = None,
                     defaults_jobs: Mapping[str, Any] | None = None,
                     cluster_label: str | None = None) -> dict[str, Any]:
    """A TerraformCluster/TerraformMachine/TerraformMachinePool.

    ``jobs`` -> spec.jobs; ``defaults_jobs`` -> spec.defaults.jobs (TerraformCluster);
    ``cluster_label`` -> label cluster.x-k8s.io/cluster-name.
    """
    assert kind in KIND_SHORT, kind
    spec: dict[str, Any] = {}
    if jobs is not None:
        spec["jobs"] = dict(jobs)
    if defaults_jobs is not None:
        spec["defaults"] = {"jobs": dict(defaults_jobs)}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": str(uuid.uuid4())}
    if cluster_label is not None:
        meta["labels"] = {CLUSTER_NAME: cluster_label}
    return {
        "apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}",
        "kind": kind,
        "metadata": meta,
        "spec": spec,
        "status": {"stateSecretSuffix": state_suffix(ns, kind, name)},
    }


def capi_cluster(ns: str, name: str, infra_ref_name: str, version: str = "v1beta2") -> dict[str, Any]:
    """A CAPI Cluster whose infrastructureRef names a TerraformCluster.

    v1beta2 refs carry apiGroup/kind/name; v1beta1 refs apiVersion/kind/name.
    """
    if version == "v1beta2":
        ref = {"apiGroup": INFRA_GROUP, "kind": "TerraformCluster", "name": infra_ref_name}
    else:
        ref = {"apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}", "kind": "TerraformCluster",
               "name": infra_ref_name, "namespace": ns}
    return {
        "apiVersion": f"{CAPI_GROUP}/{version}",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4())},
        "spec": {"infrastructureRef": ref},
    }


def force_unlock_event(ns: str, kind: str, name: str, job: str, *, event_time: dt.datetime | None = None,
                       event_name: str | None = None, series_count: int | None = None) -> dict[str, Any]:
    """The events.k8s.io/v1 Event CAPTF emits when a Job force-unlocks a stale state lock."""
    event_time = event_time or now_utc()
    ev: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name or f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns,
                     "uid": str(uuid.uuid4())},
        "eventTime": rfc3339_nano(event_time)[:-4] + "Z",  # MicroTime: microseconds
        "type": "Warning",
        "reason": "ForceUnlocked",
        "action": "Run",
        "reportingController": "captf-manager",
        "reportingInstance": "captf-manager-0",
        "regarding": {"apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}", "kind": kind, "namespace": ns,
                      "name": name},
        "related": {"apiVersion": "batch/v1", "kind": "Job", "namespace": ns, "name": job},
        "note": f"Job {job} force-unlocks a stale state lock whose holder pod no longer exists",
    }
    if series_count is not None:
        ev["series"] = {"count": series_count, "lastObservedTime": ev["eventTime"]}
    return ev


def create_oncall_locks(kube: Any, ns: str, kind: str = "TerraformMachine") -> None:
    """Three held locks in ``ns`` through ``kube.create`` (the emulator or a real API server): ``web``
    held by a workstation for 15 minutes (lock ID ``lock-web-1``), ``stale`` by a runner pod that
    does not exist, ``live`` by a Running runner pod."""
    old = now_utc() - dt.timedelta(seconds=900)
    for n in ["web", "stale", "live"]:
        kube.create(terraform_object(kind, ns, n))
    kube.create(lock_lease(ns, kind, "web", lock_info=lock_info_doc("alice@laptop", created=old, lock_id="lock-web-1")))
    kube.create(lock_lease(ns, kind, "stale", who=f"@{runner_pod_name(kind, 'stale', 'apply', 3)}"))
    p_live = runner_pod_name(kind, "live")
    kube.create(pod(ns, p_live, "Running", kind=kind, owner="live"))
    kube.create(lock_lease(ns, kind, "live", who=f"@{p_live}"))
