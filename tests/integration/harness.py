"""Integration-test harness: the real exporter binary against kmock's Kubernetes emulator.

Pieces:

* ``KubeEmulator``  -- kmock ``KubernetesEmulator`` served on a real 127.0.0.1 TCP port from a
  background thread with its own asyncio loop.  Objects are written over HTTP (POST / merge PATCH /
  DELETE) so that they reach the emulator's watch streams; every write gets a fresh, increasing
  ``metadata.resourceVersion`` (kmock does not assign one).  Requests are recorded by kmock, so the
  harness can tell which requests the exporter made (the harness tags its own with a header).
* ``Exporter``      -- the binary as a subprocess, stdout+stderr to a log file, stopped by PID.
* ``wait_for``      -- deadline-based polling (50 ms); nothing here sleeps a fixed time.
* ``Metrics``       -- parsed ``/metrics`` samples with label lookups.
* object builders   -- Leases, lock-info, runner pods, Terraform* objects, CAPI Clusters,
  ForceUnlocked Events, written the way CAPTF and the Terraform/OpenTofu backend write them
  (docs/contract.md section 2).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import requests
from prometheus_client.parser import text_string_to_metric_families

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

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

#: Header the harness puts on its own requests to the emulator, to tell them from the exporter's.
HARNESS_HEADER = "X-Captf-Itest"

DEFAULT_EXPORTER_BIN = "/work/main/target/debug/captf-lock-exporter"

PROM_ACCEPT = "text/plain; version=0.0.4"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass(frozen=True)
class ResourceDef:
    """One API resource the emulator can serve (the `resource` label of watch metrics = plural)."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool = True

    @property
    def key(self) -> str:  # kmock's resource key: 'group/version/plural' or 'v1/pods'
        return f"{self.group}/{self.version}/{self.plural}" if self.group else f"{self.version}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return base


RESOURCES: dict[str, ResourceDef] = {
    r.plural: r
    for r in (
        ResourceDef("coordination.k8s.io", "v1", "leases", "Lease", "lease"),
        ResourceDef("", "v1", "pods", "Pod", "pod"),
        ResourceDef("events.k8s.io", "v1", "events", "Event", "event"),
        ResourceDef(INFRA_GROUP, INFRA_VERSION, "terraformclusters", "TerraformCluster", "terraformcluster"),
        ResourceDef(INFRA_GROUP, INFRA_VERSION, "terraformmachines", "TerraformMachine", "terraformmachine"),
        ResourceDef(INFRA_GROUP, INFRA_VERSION, "terraformmachinepools", "TerraformMachinePool",
                    "terraformmachinepool"),
        ResourceDef(CAPI_GROUP, "v1beta2", "clusters", "Cluster", "cluster"),
    )
}
#: The resources served by default (keys of RESOURCES; the key is the plural).
ALL_RESOURCES: tuple[str, ...] = tuple(RESOURCES)
#: Alternatives a test can serve instead (key != plural): CAPI's older Cluster version.
RESOURCES["clusters.v1beta1"] = ResourceDef(CAPI_GROUP, "v1beta1", "clusters", "Cluster", "cluster")


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WaitTimeout(AssertionError):
    pass


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` every ``interval`` s until it returns a truthy value; return that value.

    Exceptions raised by the predicate count as "not yet" and the last one is reported on timeout.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    last_val: Any = None
    while True:
        try:
            last_val = predicate()
            if last_val:
                return last_val
            last_exc = None
        except (ExporterDied, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f"last error: {last_exc!r}" if last_exc is not None else f"last value: {last_val!r}"
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}; {detail}")
        time.sleep(interval)


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


# --------------------------------------------------------------------------------------------
# Emulator
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    action: str | None
    resource: str | None  # plural
    harness: bool


def _quick_shutdown_server_cls() -> type:
    import aiohttp.test_utils

    class QuickShutdownServer(aiohttp.test_utils.RawTestServer):
        """aiohttp waits up to 60 s for open handlers (watch streams) at shutdown; 1 s is enough."""

        async def _make_runner(self, debug: bool = True, **kwargs: Any) -> Any:
            from aiohttp.web_runner import ServerRunner
            from aiohttp.web_server import Server

            srv = Server(self._handler, loop=self._loop, debug=debug, **kwargs)
            return ServerRunner(srv, debug=debug, shutdown_timeout=1.0, **kwargs)

    return QuickShutdownServer


@dataclass
class Injection:
    active: bool = True
    hits: int = 0

    def clear(self) -> None:
        self.active = False


class KubeEmulator:
    """kmock's KubernetesEmulator on a real 127.0.0.1 port, driven from a background thread."""

    _rv = itertools.count(1)
    _rv_lock = threading.Lock()

    def __init__(self, resources: Iterable[str] = ALL_RESOURCES):
        self.resources = tuple(resources)
        unknown = set(self.resources) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown resources: {sorted(unknown)}")
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.k: Any = None  # the kmock.KubernetesEmulator
        self.port: int = 0
        self.session = requests.Session()
        self.session.headers[HARNESS_HEADER] = "harness"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> "KubeEmulator":
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kmock emulator did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("kmock emulator failed to start") from self._error
        return self

    def _run(self) -> None:
        import kmock  # imported here so that a missing install fails the fixture, not collection

        _QuickShutdownServer = _quick_shutdown_server_cls()

        def declare(k: Any, plural: str) -> None:
            r = RESOURCES[plural]
            k.resources[r.key] = kmock.ResourceInfo(
                kind=r.kind, singular=r.singular, namespaced=r.namespaced,
                verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            )

        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            k = kmock.KubernetesEmulator()
            for plural in self.resources:
                declare(k, plural)
            self._stop = asyncio.Event()
            async with k, kmock.Server(k, host="127.0.0.1", server_cls=_QuickShutdownServer) as srv:
                self.k = k
                self.port = srv.port
                self._ready.set()
                await self._stop.wait()

        self._declare = declare  # for add_resource(); set before start() returns
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # noqa: BLE001
            self._error = e
            self._ready.set()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001
                pass
            loop.close()

    def stop(self, timeout: float = 15.0) -> None:
        self.session.close()
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, coro_fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``coro_fn()`` (a coroutine factory) on the emulator's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro_fn(), self._loop).result(timeout)

    # -- writes (over HTTP, so that watches see them) ----------------------------------------

    @classmethod
    def next_rv(cls) -> str:
        with cls._rv_lock:
            return str(next(cls._rv))

    def _check(self, resp: requests.Response, what: str) -> dict[str, Any]:
        if resp.status_code >= 300:
            raise AssertionError(f"emulator refused {what}: HTTP {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    def create(self, obj: Mapping[str, Any], resource: str | None = None) -> dict[str, Any]:
        """POST the object (resource from its kind unless given), with a fresh resourceVersion."""
        obj = json.loads(json.dumps(obj))
        r = RESOURCES[resource] if resource else self._resource_for(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = self.next_rv()
        ns = meta.get("namespace")
        resp = self.session.post(self.url + r.path(ns), json=obj, timeout=10)
        return self._check(resp, f"create {r.plural} {ns}/{meta.get('name')}")

    def patch(self, resource: str, ns: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch (None removes a key), with a fresh resourceVersion."""
        patch = json.loads(json.dumps(patch))
        patch.setdefault("metadata", {})["resourceVersion"] = self.next_rv()
        r = RESOURCES[resource]
        resp = self.session.patch(self.url + r.path(ns, name), data=json.dumps(patch), timeout=10,
                                  headers={"Content-Type": "application/merge-patch+json"})
        return self._check(resp, f"patch {resource} {ns}/{name}")

    def delete(self, resource: str, ns: str, name: str) -> dict[str, Any]:
        """DELETE the object.  Objects with finalizers only get a deletionTimestamp (as in Kubernetes)."""
        r = RESOURCES[resource]
        resp = self.session.delete(self.url + r.path(ns, name), timeout=10)
        return self._check(resp, f"delete {resource} {ns}/{name}")

    def get(self, resource: str, ns: str, name: str) -> requests.Response:
        return self.session.get(self.url + RESOURCES[resource].path(ns, name), timeout=10)

    def list(self, resource: str, ns: str | None = None) -> list[dict[str, Any]]:
        resp = self.session.get(self.url + RESOURCES[resource].path(ns), timeout=10)
        return self._check(resp, f"list {resource}")["items"]

    def _resource_for(self, obj: Mapping[str, Any]) -> ResourceDef:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        for key in (*self.resources, *RESOURCES):
            r = RESOURCES[key]
            if r.api_version == api_version and r.kind == kind:
                return r
        raise ValueError(f"no resource for apiVersion={api_version!r} kind={kind!r}")

    # Convenience: lease/pod specific transitions --------------------------------------------

    def release_lock(self, ns: str, lease_name_: str) -> dict[str, Any]:
        """Unlock as the backend does: clear holderIdentity, remove the lock-info annotation."""
        return self.patch("leases", ns, lease_name_, {
            "metadata": {"annotations": {LOCK_INFO_ANNOTATION: None}},
            "spec": {"holderIdentity": None},
        })

    def set_pod_phase(self, ns: str, name: str, phase: str) -> dict[str, Any]:
        return self.patch("pods", ns, name, {"status": {"phase": phase}})

    def add_resource(self, plural: str) -> None:
        """Start serving a resource that was left out (a CRD installed while the exporter runs)."""

        async def add() -> None:
            self._declare(self.k, plural)

        self._call(add)
        self.resources = tuple(dict.fromkeys((*self.resources, plural)))

    # -- failure injection --------------------------------------------------------------------

    def fail_get(self, path: str, status: int = 503, reason: str = "ServiceUnavailable") -> "Injection":
        """Make GET <path> (exact path, e.g. a pod's URL) answer ``status`` until the handle is cleared.

        A kmock reaction of higher priority than the emulator's own handlers; once cleared it returns
        nothing and kmock falls through to the normal emulated answer.
        """
        import kmock

        inj = Injection()

        def react() -> Any:
            if inj.active:
                inj.hits += 1
                return kmock.KubernetesError(status=status, reason=reason,
                                             message="failure injected by the integration test")
            return None  # no reaction: the emulator serves the request as usual

        async def register() -> None:
            self.k[f"get {path}"] << react

        self._call(register)
        return inj

    # -- inspection ---------------------------------------------------------------------------

    def requests(self) -> list[RecordedRequest]:
        """Every request kmock has recorded so far (harness ones flagged)."""

        async def snap() -> list[RecordedRequest]:
            out = []
            for req in list(self.k._requests):
                res = req.resource.plural if req.resource is not None else None
                out.append(RecordedRequest(
                    method=str(req.method.value if hasattr(req.method, "value") else req.method).upper(),
                    path=req.url.path, query=dict(req.params),
                    action=req.action.value if req.action is not None else None,
                    resource=res, harness=HARNESS_HEADER in req.headers or HARNESS_HEADER.lower() in {
                        h.lower() for h in req.headers}))
            return out

        return self._call(snap)

    def exporter_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests() if not r.harness]

    def watchers(self) -> dict[str, int]:
        """Number of live watch streams per declared resource (kmock bus subscribers)."""

        async def snap() -> dict[str, int]:
            import kmock

            out = {}
            for plural in self.resources:
                r = RESOURCES[plural]
                res = kmock.resource(r.group, r.version, r.plural)
                bus = self.k._buses.get(res)
                out[plural] = bus.consumer_count if bus is not None else 0
            return out

        return self._call(snap)

    def wait_watched(self, resources: Iterable[str] | None = None, timeout: float = 30.0) -> None:
        """Wait until each resource has a live watch stream subscribed in the emulator.

        kmock snapshots the objects for a new watch and only then subscribes it to change events:
        a write in between is lost to that watch.  Writing only after this returns avoids that.
        """
        wanted = tuple(resources) if resources is not None else self.resources

        def ok() -> bool:
            w = self.watchers()
            return all(w.get(p, 0) > 0 for p in wanted)

        try:
            wait_for(ok, timeout, f"the exporter to watch {list(wanted)}")
        except WaitTimeout as e:
            raise WaitTimeout(f"{e}; watchers now: {self.watchers()}") from None


# --------------------------------------------------------------------------------------------
# Exporter process
# --------------------------------------------------------------------------------------------


class ExporterDied(AssertionError):
    pass


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: kmock\n  cluster:\n    server: {server}\n"
        "users:\n"
        "- name: anonymous\n  user: {}\n"
        "contexts:\n"
        "- name: kmock\n  context:\n    cluster: kmock\n    user: anonymous\n    namespace: default\n"
        "current-context: kmock\n"
    )
    return path


@dataclass
class Metrics:
    """Parsed samples of one scrape."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    text: str = ""

    def all(self, name: str, /, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(l, v) for (n, l, v) in self.samples
                if n == name and all(l.get(k) == str(val) for k, val in labels.items())]

    def get(self, name: str, /, **labels: str) -> float | None:
        """Value of the one sample matching name and (a subset of) labels; None if absent."""
        found = self.all(name, **labels)
        if not found:
            return None
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}: {found}")
        return found[0][1]

    sample = get  # sample(name, **labels): the value, or None when absent

    def labels(self, name: str, /, **labels: str) -> dict[str, str] | None:
        found = self.all(name, **labels)
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}: {found}")
        return found[0][0] if found else None

    def names(self) -> set[str]:
        return {n for (n, _, _) in self.samples}


class Exporter:
    """The captf-lock-exporter binary as a subprocess."""

    def __init__(self, binary: str, kubeconfig: Path, log_path: Path, extra_args: Iterable[str] = (),
                 log_level: str = "debug"):
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.log_level = log_level
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None
        self.http = requests.Session()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Exporter":
        if not os.access(self.binary, os.X_OK):
            raise FileNotFoundError(f"exporter binary {self.binary} not found or not executable "
                                    "(build it with `cargo build`, or set EXPORTER_BIN)")
        self.port = free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KUBERNETES_", "CAPTF_LOCK_EXPORTER_"))
               and k not in ("KUBECONFIG", "RUST_LOG")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        env.setdefault("RUST_BACKTRACE", "1")
        self.argv = [self.binary, "--kubeconfig", str(self.kubeconfig),
                     "--listen-address", f"127.0.0.1:{self.port}",
                     "--log-format", "json", "--log-level", self.log_level, *self.extra_args]
        self._log = open(self.log_path, "ab")
        self._log.write(("$ " + " ".join(self.argv) + "\n").encode())
        self._log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        return self

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ExporterDied(f"exporter exited with code {self.proc.returncode}; log: {self.log_path}")

    def wait_healthy(self, timeout: float = 20.0) -> None:
        def ok() -> bool:
            self.check_alive()
            return self.http.get(self.url + "/healthz", timeout=2).status_code == 200

        wait_for(ok, timeout, "exporter /healthz to answer 200")

    def get(self, path: str, **kw: Any) -> requests.Response:
        self.check_alive()
        kw.setdefault("timeout", 5)
        return self.http.get(self.url + path, **kw)

    def scrape(self) -> Metrics:
        """GET /metrics in the Prometheus 0.0.4 text format and parse every sample."""
        resp = self.get("/metrics", headers={"Accept": PROM_ACCEPT})
        resp.raise_for_status()
        text = resp.text
        samples = []
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                samples.append((s.name, dict(s.labels), float(s.value)))
        return Metrics(samples, text)

    def stop(self, timeout: float = 10.0) -> int | None:
        self.http.close()
        rc = stop_process(self.proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        return rc

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def stop_process(proc: subprocess.Popen | None, timeout: float) -> int | None:
    """Stops ``proc`` by PID: SIGTERM, wait up to ``timeout``, then SIGKILL. Returns its exit code."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def wait_metric(exporter: Exporter, predicate: Callable[[Metrics], Any], timeout: float, what: str) -> Metrics:
    """Scrape until ``predicate(metrics)`` is truthy; returns the scrape that satisfied it."""
    holder: dict[str, Metrics] = {}

    def probe() -> Any:
        m = exporter.scrape()
        holder["m"] = m
        return predicate(m)

    try:
        wait_for(probe, timeout, what)
        return holder["m"]
    except WaitTimeout as e:
        m = holder.get("m")
        tail = ""
        if m is not None:
            lines = [l for l in m.text.splitlines() if l.startswith("captf_")]
            tail = "\nlast scrape (captf_* samples):\n" + "\n".join(lines[:200])
        raise WaitTimeout(f"{e}{tail}") from None


class _Present:
    def __repr__(self) -> str:
        return "PRESENT"


#: Expected value meaning "exactly one such sample, any value".
PRESENT: Any = _Present()


@dataclass(frozen=True)
class Expect:
    """One expected sample: ``value`` None means "no such sample", PRESENT "one, any value";
    labels are a subset match."""

    name: str
    labels: Mapping[str, str]
    value: float | None

    def actual(self, m: Metrics) -> Any:
        found = m.all(self.name, **self.labels)
        if not found:
            return None
        if len(found) > 1:
            return ("several", found)
        return found[0][1]

    def ok(self, m: Metrics) -> bool:
        actual = self.actual(m)
        if self.value is PRESENT:
            return isinstance(actual, float)
        return actual == self.value

    def __str__(self) -> str:
        lbl = ",".join(f'{k}="{v}"' for k, v in self.labels.items())
        want = "absent" if self.value is None else "present" if self.value is PRESENT else self.value
        return f"{self.name}{{{lbl}}} == {want}"


def E(name: str, value: Any, /, **labels: str) -> Expect:  # noqa: N802 - reads well in tests
    return Expect(name, labels, value)


def wait_samples(exporter: "Exporter", expects: Iterable[Expect], timeout: float = 20.0,
                 what: str = "") -> Metrics:
    """Scrape until every expectation holds; on timeout list the ones that do not, with actuals."""
    expects = list(expects)
    last: dict[str, Metrics] = {}

    def probe() -> bool:
        m = exporter.scrape()
        last["m"] = m
        return all(e.ok(m) for e in expects)

    try:
        wait_for(probe, timeout, what or f"{len(expects)} expected samples")
    except WaitTimeout as e:
        m = last.get("m")
        if m is None:
            raise
        bad = [f"  want {x}, got {x.actual(m)!r}" for x in expects if not x.ok(m)]
        lines = [l for l in m.text.splitlines() if l.startswith("captf_")]
        raise WaitTimeout(f"{e}\nunmet:\n" + "\n".join(bad) +
                          "\nlast scrape (captf_* samples):\n" + "\n".join(lines[:300])) from None
    return last["m"]


#: (test id, what, seconds) -- printed in the terminal summary by conftest.
LATENCIES: list[tuple[str, str, float]] = []
