"""Fixtures of the realtools suite: the realkube control plane (etcd + kube-apiserver, CRDs), the
chart's RBAC for the exporter, the tools built from Go modules (tools/realtools/build.sh), a fresh
namespace per test, and the on-call identity: a ServiceAccount bound to exactly the Role the
runbook's docs/runbooks/before-you-begin.md prints, applied as printed.

Environment:
  EXPORTER_BIN      the binary (default: target/release/captf-lock-exporter of this checkout)
  REALTOOLS_TOOLS   the tools that take locks, space-separated (default: "tofu"; "tofu terraform" adds Terraform)
  REALTOOLS_REPORT  where the measurements go as JSON (default target/realtools-report.json)
"""

from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from pykit.chart import Install
from pykit.controlplane import ROOT, ControlPlane, Kube
from pykit.diagnostics import log_section, on_failure, report_measurements
from pykit.exporter import Exporter, exporter_bin, wait_metric
from pykit.realtools import IacTool, Shell, tool_binaries

pytest_plugins = ("pykit.pytest_hooks", "pykit.control_plane_fixtures")

os.environ.setdefault("EXPORTER_BIN", str(ROOT / "target" / "release" / "captf-lock-exporter"))

TOOLS = tuple(os.environ.get("REALTOOLS_TOOLS", "tofu").split())
RESOURCES = ("leases", "pods", "events", "terraformclusters", "terraformmachines", "terraformmachinepools",
             "terraformplans", "clusters")

#: the runbook page that prints the on-call Role
BEFORE_YOU_BEGIN = ROOT / "docs" / "runbooks" / "before-you-begin.md"

#: measurements of the session: releases seen and their latency, commands run per class
REPORT: dict[str, Any] = {"releases": [], "commands": {}, "tools": {}}


def runbook_oncall_role() -> dict[str, Any]:
    """The Role the runbook's "Before you begin" prints, parsed from its yaml block."""
    text = BEFORE_YOU_BEGIN.read_text()
    start = text.index("**What you need: the on-call Role.**")
    m = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
    assert m, f"{BEFORE_YOU_BEGIN}: no yaml block after 'What you need: the on-call Role.'"
    role = yaml.safe_load(m.group(1))
    assert role["kind"] == "Role", role
    return role


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    t0 = time.monotonic()
    paths = tool_binaries(("kubectl", *TOOLS))
    REPORT["tools_ready_after_s"] = round(time.monotonic() - t0, 1)
    for name, p in paths.items():
        REPORT["tools"][name] = p.name
    return paths


_ns_counter = itertools.count(1)


@pytest.fixture
def ns(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"rt{next(_ns_counter)}-{base}"[:63].strip("-")
    kube.namespace(name)
    yield name
    for p in kube.list("pods", name)["items"]:
        if p["metadata"].get("finalizers"):
            kube.patch("pods", name, p["metadata"]["name"], {"metadata": {"finalizers": None}})
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", json={"gracePeriodSeconds": 0}, ok=(200,))


@dataclass
class OnCall:
    """The on-call person: the runbook's Role in the test's namespace, bound to a ServiceAccount."""

    user: str
    kubeconfig: Path
    shell: Shell


@pytest.fixture
def oncall(cp: ControlPlane, kube: Kube, ns: str, binaries: dict[str, Path], tmp_path: Path) -> OnCall:
    role = runbook_oncall_role()
    role["metadata"]["namespace"] = ns
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", json=role)
    kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                 json={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "oncall"}})
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "oncall"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "oncall", "namespace": ns}]})
    token = kube.token(ns, "oncall")
    kc = cp.kubeconfig(tmp_path / "oncall-kubeconfig", token, namespace=ns, user="oncall")
    tools = dict(binaries)
    tools["captf-lock-exporter"] = Path(exporter_bin())
    shell = Shell.make(tmp_path / "oncall", kc.read_text(), tools)
    return OnCall(f"system:serviceaccount:{ns}:oncall", kc, shell)


@pytest.fixture
def admin_kubeconfig(cp: ControlPlane, tmp_path: Path) -> Path:
    """What the tools that take the locks use (a runner's or a person's own credentials)."""
    return cp.kubeconfig(tmp_path / "admin-kubeconfig", cp.admin_token, user="admin")


@pytest.fixture
def iac(binaries: dict[str, Path], tmp_path: Path) -> Callable[[str], IacTool]:
    def make(name: str) -> IacTool:
        return IacTool(name, binaries[name], tmp_path / f"{name}-home")
    return make


@pytest.fixture
def start_exporter(install: Install, cp: ControlPlane, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[[], Exporter]]:
    """The binary through pykit's Exporter (its default flags), the chart's ServiceAccount token."""
    started: list[Exporter] = []
    on_failure(request.node, lambda: [log_section(e, 200) for e in started])

    def start() -> Exporter:
        kc = cp.kubeconfig(tmp_path / f"exporter-kubeconfig-{len(started)}", install.token)
        exp = Exporter(exporter_bin(), kc, tmp_path / f"exporter-{len(started)}.log",
                       log_level="info,captf_lock_exporter=debug")
        started.append(exp)
        exp.start()
        exp.wait_healthy()
        wait_metric(exp, lambda m: all(m.get("captf_lock_exporter_watch_up", resource=r) == 1 for r in RESOURCES),
                    60, "watch_up 1 for every resource")
        return exp

    yield start
    for e in started:
        e.stop()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not REPORT["releases"] and not REPORT["commands"]:
        return
    out = Path(os.environ.get("REALTOOLS_REPORT", ROOT / "target" / "realtools-report.json"))
    report_measurements(terminalreporter, "realtools", REPORT, out)
