"""kmock's Kubernetes emulator served on a real 127.0.0.1 TCP port from a background thread with its
own asyncio loop (``aioloop.LoopThread``).

Objects are written over HTTP (POST / merge PATCH / DELETE) so that they reach the emulator's watch
streams; every write gets a fresh, increasing ``metadata.resourceVersion`` (kmock does not assign
one).  Requests are recorded by kmock, so the harness can tell which requests the exporter made (the
harness tags its own with a header).  ``RESOURCES`` is the table of API resources it can serve.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import requests

from pykit.aioloop import LoopThread
from pykit.builders import CAPI_GROUP, INFRA_GROUP, INFRA_VERSION, LOCK_INFO_ANNOTATION
from pykit.net import WaitTimeout, wait_for

#: Header the harness puts on its own requests to the emulator, to tell them from the exporter's.
HARNESS_HEADER = "X-Captf-Itest"


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
        ResourceDef(INFRA_GROUP, INFRA_VERSION, "terraformplans", "TerraformPlan", "terraformplan"),
        ResourceDef(CAPI_GROUP, "v1beta2", "clusters", "Cluster", "cluster"),
        # cluster-scoped: the lost-node evidence of own locks (issue 49)
        ResourceDef("", "v1", "nodes", "Node", "node", namespaced=False),
    )
}
#: The resources served by default (keys of RESOURCES; the key is the plural).
ALL_RESOURCES: tuple[str, ...] = tuple(RESOURCES)
#: Alternatives a test can serve instead (key != plural): CAPI's older Cluster version.
RESOURCES["clusters.v1beta1"] = ResourceDef(CAPI_GROUP, "v1beta1", "clusters", "Cluster", "cluster")



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


#: Flags every exporter pointed at the emulator gets. kmock ignores ``sendInitialEvents``: a
#: watch-list request gets an ordinary watch (every object as ADDED, then changes) and never the
#: initial-events-end bookmark, so the exporter would only fall back to paged lists after its
#: silence limit. A real kube-apiserver either streams or refuses the parameters (tests/realkube
#: covers both); against the emulator the tests list in pages from the start.
EXPORTER_ARGS: tuple[str, ...] = ("--watch-list=false",)


class KubeEmulator(LoopThread):
    """kmock's KubernetesEmulator on a real 127.0.0.1 port, driven from a background thread."""

    what = "kmock emulator"
    thread_name = "kmock"
    _rv = itertools.count(1)
    _rv_lock = threading.Lock()

    def __init__(self, resources: Iterable[str] = ALL_RESOURCES):
        super().__init__()
        self.resources = tuple(resources)
        unknown = set(self.resources) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown resources: {sorted(unknown)}")
        self.k: Any = None  # the kmock.KubernetesEmulator
        self.port: int = 0
        self.session = requests.Session()
        self.session.headers[HARNESS_HEADER] = "harness"

    # -- lifecycle --------------------------------------------------------------------------

    @staticmethod
    def _declare(k: Any, plural: str) -> None:
        import kmock

        r = RESOURCES[plural]
        k.resources[r.key] = kmock.ResourceInfo(
            kind=r.kind, singular=r.singular, namespaced=r.namespaced,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        )

    async def _serve(self) -> None:
        import kmock  # imported here so that a missing install fails the fixture, not collection

        k = kmock.KubernetesEmulator()
        for plural in self.resources:
            self._declare(k, plural)
        assert self._stop is not None
        async with k, kmock.Server(k, host="127.0.0.1", server_cls=_quick_shutdown_server_cls()) as srv:
            self.k = k
            self.port = srv.port
            self._ready.set()
            await self._stop.wait()

    def stop(self, timeout: float = 15.0) -> None:
        self.session.close()
        super().stop(timeout)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def failure_report(self, last: int = 200) -> list[tuple[str, str]]:
        """A failure-report section (pykit.diagnostics): the last ``last`` requests, H=harness, E=exporter."""
        if self.k is None:
            return []
        reqs = self.requests()
        text = "\n".join(f"{'H' if r.harness else 'E'} {r.method} {r.path} {r.query}" for r in reqs[-last:])
        return [(f"emulator requests (last {min(last, len(reqs))} of {len(reqs)}; H=harness, E=exporter)", text)]

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

