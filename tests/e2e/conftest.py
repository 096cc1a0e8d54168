"""Fixtures of the end-to-end test: the stack (emulator, exporter, webhook, Alertmanager,
Prometheus), torn down by PID whatever happens, and the logs of every process on failure.

Environment:
  EXPORTER_BIN  -- path of the exporter binary (default /work/main/target/debug/captf-lock-exporter).
The shared pieces are in tests/pykit (pytest.ini puts tests/ on sys.path); failure reports come from
its pytest plugin, pykit.pytest_hooks (sources registered with pykit.diagnostics.on_failure).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from pykit.diagnostics import on_failure
from pykit.exporter import exporter_bin
from stack import Clock, Stack

pytest_plugins = ("pykit.pytest_hooks",)

LOG_TAIL_LINES = 150


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
    on_failure(request.node, lambda: s.failure_report(LOG_TAIL_LINES))
    try:
        yield s
    finally:
        errs = s.stop()
        if errs:
            raise AssertionError("teardown: " + "; ".join(errs))
