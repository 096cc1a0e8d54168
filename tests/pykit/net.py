"""Ports and deadline-based waits (standard library only); nothing here sleeps a fixed time."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from pykit.process import ProcessDied


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WaitTimeout(AssertionError):
    pass


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` every ``interval`` s until it returns a truthy value; return that value.

    Exceptions raised by the predicate count as "not yet" and the last one is reported on timeout;
    ``ProcessDied`` (a managed process exited) and KeyboardInterrupt end the wait at once.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    last_val: Any = None
    while True:
        try:
            last_val = predicate()
            if last_val:
                return last_val
            last_exc = None
        except (ProcessDied, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f"last error: {last_exc!r}" if last_exc is not None else f"last value: {last_val!r}"
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}; {detail}")
        time.sleep(interval)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET ``url`` answers 200 (False for another status; connection errors raise)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False
