"""The processes a benchmark or soak script starts: each started here with its output in a log
file, and stopped here by PID (SIGTERM, then SIGKILL), also on failure and on Ctrl-C (the
scripts call ``stop_all`` from their ``finally`` and signal handlers). Standard library only, so
every script under tools/ can import it (``sys.path`` gets tools/ first)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

try:  # the asyncio scripts use aiohttp; its errors are then retried like a refused connection
    import aiohttp
    RETRIED: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
except ImportError:
    RETRIED = (OSError, asyncio.TimeoutError)

#: every process started and not stopped yet, in start order
PROCS: list[subprocess.Popen] = []


def start(argv: list[str], log_path: Path, **popen_kw) -> subprocess.Popen:
    """Starts ``argv`` with stderr (and stdout, unless ``stdout=`` is given) appended to
    ``log_path``, after a ``$ command`` line."""
    logf = open(log_path, "ab")
    logf.write(("$ " + " ".join(argv) + "\n").encode())
    logf.flush()
    try:
        p = subprocess.Popen(argv, stdout=popen_kw.pop("stdout", logf), stderr=logf,
                             stdin=subprocess.DEVNULL, **popen_kw)
    finally:
        logf.close()  # the child holds its own descriptor
    PROCS.append(p)
    return p


def stop(p: subprocess.Popen | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; forgets the process."""
    if p is None:
        return
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGTERM)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        except ProcessLookupError:
            pass
    if p in PROCS:
        PROCS.remove(p)


def stop_all() -> None:
    """Stops every process still running, the last started first."""
    for p in reversed(list(PROCS)):
        stop(p)
    PROCS.clear()


def stop_all_on_signals() -> None:
    """SIGTERM and SIGINT stop every process started here, then exit with 128 + the signal."""
    def on_signal(signum, _frame):
        stop_all()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


async def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    """Polls the (async) predicate until it returns a truthy value, or fails after ``timeout``
    seconds naming ``what`` and the last error (connection errors are retried)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            v = await pred()
            if v:
                return v
        except RETRIED as e:
            last = e
        await asyncio.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exporter_env() -> dict[str, str]:
    """This environment without what would point an exporter elsewhere: in-cluster settings, its
    own flag fallbacks, a kubeconfig, a log filter."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("KUBERNETES_", "CAPTF_LOCK_EXPORTER_")) and k not in ("KUBECONFIG", "RUST_LOG")}


def write_fake_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for the fake API at ``server`` (plain HTTP, no credentials)."""
    path.write_text("apiVersion: v1\nkind: Config\n"
                    f"clusters:\n- name: fake\n  cluster:\n    server: {server}\n"
                    "users:\n- name: anonymous\n  user: {}\n"
                    "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: anonymous\n"
                    "current-context: fake\n")
    return path
