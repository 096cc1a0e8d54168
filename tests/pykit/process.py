"""A binary started by a test: stdout+stderr to a log file, stopped by its PID (standard library only)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Mapping, Sequence


class ProcessDied(AssertionError):
    """A managed process exited while the test waited on it (``net.wait_for`` does not retry this)."""


def stop_process(proc: subprocess.Popen | None, timeout: float) -> int | None:
    """Stops ``proc`` by PID: SIGTERM, wait up to ``timeout``, then SIGKILL. Returns its exit code."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


class ManagedProcess:
    """A binary started by the test; stdout+stderr to ``log_path`` (the command line first);
    stopped by its PID.  ``env`` None inherits the test's environment."""

    #: Raised by ``check_alive``; subclasses narrow it (``exporter.ExporterDied``).
    died = ProcessDied
    stop_timeout = 15.0

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> "ManagedProcess":
        self._log = open(self.log_path, "ab")
        self._log.write(("$ " + " ".join(self.argv) + "\n").encode())
        self._log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env)
        return self

    def returncode(self) -> int | None:
        """The exit code, or None while it runs (or before it started)."""
        return self.proc.poll() if self.proc is not None else None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise self.died(f"{self.name} (pid {self.proc.pid}) exited with code {self.proc.returncode}; "
                            f"log {self.log_path}:\n{self.log_tail(40)}")

    def stop(self, timeout: float | None = None) -> int | None:
        rc = stop_process(self.proc, self.stop_timeout if timeout is None else timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        return rc

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])
