"""Fixtures of the realkube suite: one real control plane per session (etcd + kube-apiserver from
tools/kube/build.sh, CRDs from tests/crds), the chart's RBAC applied to it, a fresh namespace per
test, and the release binary started with a ServiceAccount token from TokenRequest.

Environment:
  EXPORTER_BIN        the binary (default: target/release/captf-lock-exporter of this checkout)
  REALKUBE_REPORT     where the session's measurements go as JSON (default target/realkube-report.json)
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from pykit.chart import RBAC_KINDS, Install, install_chart, render_chart  # noqa: F401 (used by the tests)
from pykit.controlplane import ROOT, ControlPlane, Kube, rss_kib
from pykit.diagnostics import log_section, on_failure, report_measurements
from pykit.exporter import Exporter, ExporterDied, exporter_bin, start_healthy, wait_metric

pytest_plugins = ("pykit.pytest_hooks", "pykit.control_plane_fixtures")

os.environ.setdefault("EXPORTER_BIN", str(ROOT / "target" / "release" / "captf-lock-exporter"))

CRDS = ROOT / "tests" / "crds"
RELEASE = "captf-lock-exporter"
RELEASE_NS = "captf-system"
RESOURCES = ("leases", "pods", "events", "terraformclusters", "terraformmachines", "terraformmachinepools",
             "terraformplans", "clusters", "nodes")
#: what a namespaced install watches: Nodes are cluster-scoped (--skip-resources=nodes)
NAMESPACED_RESOURCES = tuple(r for r in RESOURCES if r != "nodes")

#: measurements of the session, printed at the end and written to REALKUBE_REPORT
REPORT: dict[str, Any] = {}


class RssSampler(threading.Thread):
    """Samples the RSS of kube-apiserver and etcd every second while the tests run."""

    def __init__(self, cp: ControlPlane):
        super().__init__(daemon=True)
        self.cp = cp
        self.stop_event = threading.Event()
        self.samples: dict[str, list[int]] = {"kube-apiserver": [], "etcd": []}

    def run(self) -> None:
        while not self.stop_event.wait(1.0):
            for name, proc in (("kube-apiserver", self.cp.apiserver), ("etcd", self.cp.etcd)):
                v = rss_kib(proc.pid if proc is not None and proc.returncode() is None else None)
                if v:
                    self.samples[name].append(v)

    def summary(self) -> dict[str, Any]:
        out = {}
        for k, v in self.samples.items():
            if v:
                s = sorted(v)
                out[k] = {"peak_MiB": round(s[-1] / 1024, 1), "median_MiB": round(s[len(s) // 2] / 1024, 1),
                          "samples": len(v)}
        return out


@pytest.fixture(scope="session")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    t0 = time.monotonic()
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    try:
        plane.start()
        REPORT["control_plane_start_s"] = round(time.monotonic() - t0, 1)
        plane.kube.apply_crds([CRDS / "terraform.yaml", CRDS / "capi-cluster.yaml"])
        REPORT["ready_with_crds_s"] = round(time.monotonic() - t0, 1)
        sampler = RssSampler(plane)
        sampler.start()
        yield plane
        sampler.stop_event.set()
        REPORT["rss"] = sampler.summary()
        REPORT["start_times_s"] = [(n, round(s, 1)) for n, s in plane.start_times]
        REPORT["audit_log_MiB"] = round(plane.apiserver.audit_log.stat().st_size / 2**20, 1)
    finally:
        plane.stop()


_ns_counter = itertools.count(1)

# plural -> API prefix, for the per-test cleanup
CLEANUP = [("/apis/coordination.k8s.io/v1", "leases"), ("/apis/events.k8s.io/v1", "events"),
           ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", "terraformclusters"),
           ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", "terraformmachines"),
           ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", "terraformmachinepools"),
           ("/apis/infrastructure.cluster.x-k8s.io/v1alpha1", "terraformplans"),
           ("/apis/cluster.x-k8s.io/v1beta2", "clusters")]


def clean_namespace(kube: Kube, ns: str) -> None:
    """Deletes the test's objects (a deleted namespace would stay Terminating: no controller)."""
    for p in kube.list("pods", ns)["items"]:
        if p["metadata"].get("finalizers"):
            kube.patch("pods", ns, p["metadata"]["name"], {"metadata": {"finalizers": None}})
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", json={"gracePeriodSeconds": 0}, ok=(200,))
    for prefix, plural in CLEANUP:
        kube.request("DELETE", f"{prefix}/namespaces/{ns}/{plural}", ok=(200, 404))


@pytest.fixture
def namespace_factory(kube: Kube, request: pytest.FixtureRequest) -> Iterator[Callable[[str], str]]:
    made: list[str] = []

    def make(hint: str = "") -> str:
        base = re.sub(r"[^a-z0-9-]", "-", (hint or request.node.name).lower()).strip("-")[:40].strip("-")
        ns = f"t{next(_ns_counter)}-{base}"[:63].strip("-")
        kube.namespace(ns)
        made.append(ns)
        return ns

    yield make
    for ns in made:
        clean_namespace(kube, ns)


@pytest.fixture
def ns(namespace_factory: Callable[[str], str]) -> str:
    """A fresh namespace for the test; its objects are deleted afterwards."""
    return namespace_factory("")


def wait_all_up(exp: Exporter, timeout: float = 60, resources: tuple[str, ...] = RESOURCES) -> None:
    wait_metric(exp, lambda m: all(m.get("captf_lock_exporter_watch_up", resource=r) == 1 for r in resources),
                timeout, f"watch_up 1 for {', '.join(resources)}")


@pytest.fixture
def start_exporter(cp: ControlPlane, install: Install, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., Exporter]]:
    """Factory: the release binary with a kubeconfig holding a ServiceAccount token and the CA.
    Waits for /healthz and, unless ``wait_up=False``, for watch_up 1 on every resource."""
    started: list[Exporter] = []
    on_failure(request.node, lambda: [log_section(e, 300) for e in started])

    def start(token: str | None = None, extra_args: tuple[str, ...] = (), wait_up: bool = True,
              resources: tuple[str, ...] = RESOURCES, secure: bool = False,
              scrape_token: str | None = None, ca: str | None = None) -> Exporter:
        """``secure``: HTTPS with Kubernetes authentication (the production default), scraped
        with ``scrape_token`` and the certificate verified with ``ca`` (None: not verified)."""
        kc = cp.kubeconfig(tmp_path / f"kubeconfig-{len(started)}", token or install.token)
        exp = start_healthy(lambda: Exporter(exporter_bin(), kc, tmp_path / f"exporter-{len(started)}.log",
                                             extra_args, log_level="info,captf_lock_exporter=debug",
                                             secure=secure, token=scrape_token, ca=ca), started)
        if wait_up:
            wait_all_up(exp, resources=resources)
        return exp

    yield start
    # an exporter that exited by itself (not stopped through stop(), which closes its log) crashed
    crashed = [e for e in started if not getattr(e, "retired", False) and e.returncode() is not None
               and e._log is not None]
    for e in started:
        e.stop()
    if crashed:
        raise ExporterDied("the exporter exited during the test: " +
                           ", ".join(f"code {e.returncode()} (log {e.log_path})" for e in crashed))


@pytest.fixture
def exporter(start_exporter: Callable[..., Exporter]) -> Exporter:
    return start_exporter()


def audit_summary(cp: ControlPlane, user: str, since: float | None = None) -> dict[str, Any]:
    reqs = cp.requests_of(user, since)
    verbs: dict[str, int] = {}
    refused = []
    for r in reqs:
        verbs[r["verb"]] = verbs.get(r["verb"], 0) + 1
        code = (r.get("responseStatus") or {}).get("code")
        if code in (401, 403):
            refused.append((r["verb"], r["requestURI"], code))
    return {"requests": len(reqs), "by_verb": verbs, "refused": refused}


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not REPORT:
        return
    out = Path(os.environ.get("REALKUBE_REPORT", ROOT / "target" / "realkube-report.json"))
    report_measurements(terminalreporter, "realkube", REPORT, out)
