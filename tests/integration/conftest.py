"""Fixtures: a kmock Kubernetes emulator per test and the real exporter binary pointed at it.

Markers:
  @pytest.mark.kube(omit=["terraformmachinepools"])  -- leave resources (CRDs) out of the emulator.
  @pytest.mark.kube(omit=["clusters"], add=["clusters.v1beta1"])  -- serve CAPI's older version.
Fault injection:
  fault_proxy  -- a FaultProxy (faults.py) in front of the emulator; start the exporter behind it with
                  start_exporter(upstream=fault_proxy.url).
Environment:
  EXPORTER_BIN  -- path of the binary (default /work/main/target/debug/captf-lock-exporter).
The shared pieces are in tests/pykit (pytest.ini puts tests/ on sys.path); failure reports come from
its pytest plugin, pykit.pytest_hooks (sources registered with pykit.diagnostics.on_failure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from faults import FaultProxy
from pykit.diagnostics import log_section, on_failure
from pykit.exporter import LATENCIES, Exporter, ExporterDied, exporter_bin, start_healthy
from pykit.kube import ALL_RESOURCES, EXPORTER_ARGS as EMULATOR_ARGS, KubeEmulator, write_kubeconfig

pytest_plugins = ("pykit.pytest_hooks",)

LOG_TAIL_LINES = 400


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kube(omit=[...], add=[...]): resources the emulator (does not) serve")


@pytest.fixture
def kube_resources(request: pytest.FixtureRequest) -> tuple[str, ...]:
    omit: set[str] = set()
    add: list[str] = []
    for marker in request.node.iter_markers("kube"):
        omit |= set(marker.kwargs.get("omit", ()))
        add += [r for r in marker.kwargs.get("add", ()) if r not in add]
    return tuple(r for r in ALL_RESOURCES if r not in omit) + tuple(add)


def _serving(server: KubeEmulator | FaultProxy, request: pytest.FixtureRequest) -> Iterator:
    """For a fixture: start ``server``, report its requests if the test fails, stop it at teardown."""
    server.start()
    on_failure(request.node, server.failure_report)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_resources: tuple[str, ...], request: pytest.FixtureRequest) -> Iterator[KubeEmulator]:
    yield from _serving(KubeEmulator(kube_resources), request)


@pytest.fixture
def start_exporter(kube: KubeEmulator, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., Exporter]]:
    """Factory: start the binary against ``kube``; waits for /healthz and for its watches.

    Create objects before calling it to exercise the initial list, after it for watch events.
    """
    started: list[Exporter] = []
    on_failure(request.node, lambda: [log_section(exp, LOG_TAIL_LINES) for exp in started])

    def start(wait_watched: bool = True, extra_args: tuple[str, ...] = (), upstream: str | None = None,
              idle_objects: bool = True) -> Exporter:
        # ``upstream``: the API server URL the kubeconfig names instead of the emulator's (a FaultProxy
        # in front of it); the watches are still awaited on the emulator, behind the proxy.
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", upstream or kube.url)
        exp = start_healthy(lambda: Exporter(exporter_bin(), kubeconfig, tmp_path / f"exporter-{len(started)}.log",
                                             (*EMULATOR_ARGS, *extra_args), idle_objects=idle_objects),
                            started)
        if wait_watched:
            kube.wait_watched()
        return exp

    try:
        yield start
    finally:
        crashed = [exp for exp in started
                   if not getattr(exp, "retired", False) and exp.proc is not None and exp.proc.poll() is not None]
        for exp in started:
            exp.stop()
    if crashed:
        raise ExporterDied("the exporter exited during the test: " + ", ".join(
            f"code {exp.proc.returncode} (log {exp.log_path})" for exp in crashed))


@pytest.fixture
def fault_proxy(kube: KubeEmulator, request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    """A FaultProxy (faults.py) in front of ``kube``, in pass mode.  Request it before
    ``start_exporter`` so that the exporter stops first."""
    yield from _serving(FaultProxy(kube.url), request)


@pytest.fixture
def exporter(start_exporter: Callable[..., Exporter]) -> Exporter:
    """The exporter, started against an empty emulator, with every served resource watched."""
    return start_exporter()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if LATENCIES:
        terminalreporter.section("observed exporter latencies (change in the API -> /metrics)")
        for test_id, what, seconds in LATENCIES:
            terminalreporter.write_line(f"{seconds * 1000:8.0f} ms  {what}  [{test_id}]")
