"""Fixtures of the end-to-end test: the stack (emulator, exporter, webhook, Alertmanager,
Prometheus), torn down by PID whatever happens, and the logs of every process on failure.

Environment:
  EXPORTER_BIN  -- path of the exporter binary (default /work/main/target/debug/captf-lock-exporter).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stack import INTEGRATION_DIR, Clock, Stack  # noqa: E402

sys.path.insert(0, str(INTEGRATION_DIR))
from harness import DEFAULT_EXPORTER_BIN  # noqa: E402

LOG_TAIL_LINES = 150


def exporter_bin() -> str:
    return os.environ.get("EXPORTER_BIN", DEFAULT_EXPORTER_BIN)


@pytest.fixture
def tools() -> dict[str, str]:
    """The real binaries; a missing one is an error that says how to install it."""
    found = {}
    for name, pkg in (("prometheus", "prometheus"), ("promtool", "prometheus"),
                      ("prometheus-alertmanager", "prometheus-alertmanager")):
        path = shutil.which(name)
        if path is None:
            pytest.fail(f"{name} not found: apt-get install -y --no-install-recommends {pkg}")
        found[name] = path
    exp = exporter_bin()
    if not os.access(exp, os.X_OK):
        pytest.fail(f"exporter binary {exp} missing: run `cargo build` in /work/main or set EXPORTER_BIN")
    found["exporter"] = exp
    return found


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stack(tmp_path: Path, clock: Clock, request: pytest.FixtureRequest) -> Iterator[Stack]:
    s = Stack(tmp_path, clock)
    request.node._e2e_stack = s
    try:
        yield s
    finally:
        errs = s.stop()
        if errs:
            raise AssertionError("teardown: " + "; ".join(errs))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    s: Stack | None = getattr(item, "_e2e_stack", None)
    if s is None:
        return
    for name, proc in (("exporter", s.exporter), ("prometheus", s.prometheus), ("alertmanager", s.alertmanager)):
        if proc is None:
            continue
        lines = proc.log_text().splitlines()
        rep.sections.append((f"{name} log [{rep.when}] {proc.log_path} (last {LOG_TAIL_LINES} of {len(lines)})",
                             "\n".join(lines[-LOG_TAIL_LINES:])))
    if s.kube is not None and getattr(s.kube, "k", None) is not None:
        try:
            reqs = s.kube.exporter_requests()
            rep.sections.append((f"emulator: exporter requests [{rep.when}] (last 100 of {len(reqs)})",
                                 "\n".join(f"{r.method} {r.path} {r.query}" for r in reqs[-100:])))
        except Exception as e:  # noqa: BLE001 - diagnostics only
            rep.sections.append((f"emulator requests [{rep.when}]", f"unavailable: {e!r}"))
    if s.webhook is not None:
        text = "\n".join(f"{a.status:8} {a.labels}" for a in s.webhook.alerts())
        rep.sections.append((f"webhook deliveries [{rep.when}]", text or "(none)"))
