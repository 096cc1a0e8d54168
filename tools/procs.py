"""The processes a benchmark or soak script starts: each started here with its output in a log
file, and stopped here by PID (SIGTERM, then SIGKILL), also on failure and on Ctrl-C (the
scripts call ``stop_all`` from their ``finally`` and signal handlers). Standard library only, so
every script under tools/ can import it (``sys.path`` gets tools/ first)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

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
