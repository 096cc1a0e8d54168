"""Fixtures of the end-to-end test: the stack (emulator, exporter, webhook, Alertmanager,
Prometheus), torn down by PID whatever happens, and the logs of every process on failure.

The test runs once per stack flavour (pytest ids ``prom2`` and ``prom3``; select with ``-k``):
  prom2 -- Debian's Prometheus 2.42, promtool, Alertmanager 0.25 (apt), one exporter replica;
  prom3 -- Prometheus 3 and Alertmanager built from Go modules by tools/prometheus3/build.sh,
           two exporter replicas (the second scraped through a recording pass-through), fed by a
           real kube-apiserver with the chart's RBAC (see ``kube_api``).

Environment:
  EXPORTER_BIN  -- path of the exporter binary (default /work/main/target/debug/captf-lock-exporter).
  PROM3_PROMETHEUS, PROM3_PROMTOOL, PROM3_ALERTMANAGER, PROM3_AMTOOL -- the prom3 binaries
                   (default: the version-keyed cache tools/prometheus3/build.sh fills; the test
                   never builds them itself, and fails when they are missing).
The shared pieces are in tests/pykit (pytest.ini puts tests/ on sys.path); failure reports come from
its pytest plugin, pykit.pytest_hooks (sources registered with pykit.diagnostics.on_failure).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from pykit.diagnostics import on_failure
from pykit.exporter import exporter_bin
from pykit.kube import ALL_RESOURCES
from stack import Clock, Flavor, Stack, prom3_paths

pytest_plugins = ("pykit.pytest_hooks",)

LOG_TAIL_LINES = 150
CRDS = Path(__file__).resolve().parent.parent / "crds"


@pytest.fixture(params=["prom2", "prom3"])
def flavor(request: pytest.FixtureRequest) -> Flavor:
    """The stack under test; a missing binary is an error that says how to get it."""
    if request.param == "prom2":
        found = {}
        for name, pkg in (("prometheus", "prometheus"), ("promtool", "prometheus"),
                          ("prometheus-alertmanager", "prometheus-alertmanager")):
            path = shutil.which(name)
            if path is None:
                pytest.fail(f"{name} not found: apt-get install -y --no-install-recommends {pkg}")
            found[name] = path
        return Flavor("prom2", found["prometheus"], found["promtool"], found["prometheus-alertmanager"],
                      None, replicas=1, prom_log_level="info", tap=False)
    try:
        p = prom3_paths()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    for k, v in p.items():
        if not os.access(v, os.X_OK):
            pytest.fail(f"{k}={v} is not an executable (build with tools/prometheus3/build.sh)")
    return Flavor("prom3", p["PROM3_PROMETHEUS"], p["PROM3_PROMTOOL"], p["PROM3_ALERTMANAGER"],
                  p["PROM3_AMTOOL"], replicas=2, prom_log_level="debug", tap=True)


@pytest.fixture
def tools(flavor: Flavor) -> dict[str, str]:
    """The real binaries of this flavour (keys as the Debian names) and the exporter."""
    found = {"prometheus": flavor.prometheus, "promtool": flavor.promtool,
             "prometheus-alertmanager": flavor.alertmanager}
    exp = exporter_bin()
    if not os.access(exp, os.X_OK):
        pytest.fail(f"exporter binary {exp} missing: run `cargo build` in /work/main or set EXPORTER_BIN")
    found["exporter"] = exp
    return found


@pytest.fixture
def kube_api(flavor: Flavor, tmp_path: Path) -> Iterator[Callable[[Stack], Any]]:
    """How the stack gets its Kubernetes API.

    prom2: kmock's emulator with every resource the exporter watches.
    prom3: a real kube-apiserver + etcd (tests/pykit/controlplane.py; the binaries come from
    tools/kube/build.sh, which the realkube stage runs first) with the CAPTF and CAPI CRDs, the
    chart's ServiceAccount and RBAC applied, and the replicas reading a kubeconfig with that
    account's TokenRequest token and the cluster's CA (TLS verified)."""
    if flavor.id != "prom3":
        yield lambda stack: stack.start_kube(ALL_RESOURCES)
        return
    from pykit.chart import install_chart, metrics_reader_token
    from pykit.tls import SecretVolume, issue
    from stack import Secure
    from pykit.controlplane import ControlPlane

    cp = ControlPlane(tmp_path / "controlplane")
    try:
        cp.start()
        assert cp.kube is not None
        cp.kube.apply_crds([CRDS / "terraform.yaml", CRDS / "capi-cluster.yaml"])
        for ns in ("team-a", "team-b"):
            cp.kube.namespace(ns)
        install = install_chart(cp.kube, {})
        kubeconfig = cp.kubeconfig(tmp_path / "kubeconfig", install.token)
        # The endpoint as the chart serves it: HTTPS (a certificate of the test CA in a Secret
        # volume layout) and tokens; Prometheus scrapes with its ServiceAccount's token.
        vol = SecretVolume(tmp_path / "exporter-tls")
        vol.write(*issue(cp.ca_file, cp.ca_file.with_name("ca.key"), "captf-lock-exporter"))
        token = metrics_reader_token(cp.kube, install)
        token_file = tmp_path / "prometheus-token"
        token_file.write_text(token)
        secure = Secure(vol.cert, vol.key, cp.ca_file, token, token_file)
        yield lambda stack: stack.use_kube(cp.kube, kubeconfig, secure)
    finally:
        cp.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stack(tmp_path: Path, clock: Clock, flavor: Flavor, request: pytest.FixtureRequest) -> Iterator[Stack]:
    s = Stack(tmp_path, clock, flavor)
    on_failure(request.node, lambda: s.failure_report(LOG_TAIL_LINES))
    try:
        yield s
    finally:
        errs = s.stop()
        if errs:
            raise AssertionError("teardown: " + "; ".join(errs))
