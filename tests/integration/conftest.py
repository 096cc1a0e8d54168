"""Fixtures: a kmock Kubernetes emulator per test and the real exporter binary pointed at it.

Markers:
  @pytest.mark.kube(omit=["terraformmachinepools"])  -- leave resources (CRDs) out of the emulator.
  @pytest.mark.kube(omit=["clusters"], add=["clusters.v1beta1"])  -- serve CAPI's older version.
Fault injection:
  fault_proxy  -- a FaultProxy (faults.py) in front of the emulator; start the exporter behind it with
                  start_exporter(upstream=fault_proxy.url).
Environment:
  EXPORTER_BIN  -- path of the binary (default /work/main/target/debug/captf-lock-exporter).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (  # noqa: E402
    ALL_RESOURCES,
    LATENCIES,
    DEFAULT_EXPORTER_BIN,
    Exporter,
    ExporterDied,
    KubeEmulator,
    write_kubeconfig,
)
from faults import FaultProxy  # noqa: E402

LOG_TAIL_LINES = 400


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kube(omit=[...], add=[...]): resources the emulator (does not) serve")


def exporter_bin() -> str:
    return os.environ.get("EXPORTER_BIN", DEFAULT_EXPORTER_BIN)


@pytest.fixture
def kube_resources(request: pytest.FixtureRequest) -> tuple[str, ...]:
    omit: set[str] = set()
    add: list[str] = []
    for marker in request.node.iter_markers("kube"):
        omit |= set(marker.kwargs.get("omit", ()))
        add += [r for r in marker.kwargs.get("add", ()) if r not in add]
    return tuple(r for r in ALL_RESOURCES if r not in omit) + tuple(add)


@pytest.fixture
def kube(kube_resources: tuple[str, ...], request: pytest.FixtureRequest) -> Iterator[KubeEmulator]:
    emu = KubeEmulator(kube_resources).start()
    request.node._itest_kube = emu
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def start_exporter(kube: KubeEmulator, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., Exporter]]:
    """Factory: start the binary against ``kube``; waits for /healthz and for its watches.

    Create objects before calling it to exercise the initial list, after it for watch events.
    """
    started: list[Exporter] = []
    request.node._itest_exporters = started

    def start(wait_watched: bool = True, extra_args: tuple[str, ...] = (), upstream: str | None = None) -> Exporter:
        # ``upstream``: the API server URL the kubeconfig names instead of the emulator's (a FaultProxy
        # in front of it); the watches are still awaited on the emulator, behind the proxy.
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", upstream or kube.url)
        for attempt in range(3):
            exp = Exporter(exporter_bin(), kubeconfig, tmp_path / f"exporter-{len(started)}.log", extra_args)
            started.append(exp)
            exp.start()
            try:
                exp.wait_healthy()
                break
            except ExporterDied:
                # the free port found a moment ago may have been taken since: retry on a bind error
                if attempt == 2 or "in use" not in exp.log_text().lower():
                    raise
                exp.retired = True
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
    proxy = FaultProxy(kube.url).start()
    request.node._itest_proxy = proxy
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def exporter(start_exporter: Callable[..., Exporter]) -> Exporter:
    """The exporter, started against an empty emulator, with every served resource watched."""
    return start_exporter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    for exp in getattr(item, "_itest_exporters", []):
        lines = exp.log_text().splitlines()
        head = f"log file {exp.log_path} ({len(lines)} lines"
        if len(lines) > LOG_TAIL_LINES:
            head += f", last {LOG_TAIL_LINES} shown"
        rc = exp.proc.poll() if exp.proc is not None else None
        head += f"; process {'running' if rc is None else f'exited with {rc}'})"
        rep.sections.append((f"exporter log [{rep.when}]",
                             head + "\n" + "\n".join(lines[-LOG_TAIL_LINES:])))
    proxy = getattr(item, "_itest_proxy", None)
    if proxy is not None:
        entries = proxy.log()
        rep.sections.append((f"fault proxy requests [{rep.when}] (last 300 of {len(entries)}; "
                             "seconds since the first)", proxy.format_log(entries[-300:],
                                                                          entries[0].t if entries else 0.0)))
    kube = getattr(item, "_itest_kube", None)
    if kube is not None and kube.k is not None:
        try:
            reqs = kube.requests()
            text = "\n".join(f"{'H' if r.harness else 'E'} {r.method} {r.path} {r.query}" for r in reqs[-200:])
            rep.sections.append((f"emulator requests [{rep.when}] (H=harness, E=exporter)", text))
        except Exception as e:  # noqa: BLE001
            rep.sections.append((f"emulator requests [{rep.when}]", f"unavailable: {e!r}"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if LATENCIES:
        terminalreporter.section("observed exporter latencies (change in the API -> /metrics)")
        for test_id, what, seconds in LATENCIES:
            terminalreporter.write_line(f"{seconds * 1000:8.0f} ms  {what}  [{test_id}]")
