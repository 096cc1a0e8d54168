"""Self-tests of the fault proxy (faults.py) alone, in front of the emulator; no exporter binary.

They prove what test_api_faults.py relies on: pass mode forwards lists and streams watch events
through as they happen; hang mode answers nothing and freezes open streams (and resumes them);
status mode answers the code with a Kubernetes Status body (Retry-After on 429) and ends open
streams; a watch's timeoutSeconds is honoured; every request is logged.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Iterator

import pytest
import requests

from faults import FaultProxy
from pykit.builders import lock_lease
from pykit.kube import RESOURCES, KubeEmulator
from pykit.net import wait_for

NS = "proxy-ns"
LEASES = RESOURCES["leases"]


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    e = KubeEmulator(("leases",)).start()
    yield e
    e.stop()


@pytest.fixture
def proxy(emu: KubeEmulator) -> Iterator[FaultProxy]:
    p = FaultProxy(emu.url).start()
    yield p
    p.stop()


class Stream:
    """A streamed GET read line by line in a thread; lines (and None at EOF or error) go to a queue."""

    def __init__(self, url: str, params: dict[str, str]):
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.status: int | None = None
        self.error: BaseException | None = None
        self.session = requests.Session()
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, params), daemon=True)
        self._thread.start()

    def _run(self, url: str, params: dict[str, str]) -> None:
        try:
            with self.session.get(url, params=params, stream=True, timeout=(5, 30)) as resp:
                self.status = resp.status_code
                self._opened.set()
                for line in resp.iter_lines(chunk_size=1):
                    if line:
                        self.lines.put(line)
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            self._opened.set()
            self.lines.put(None)

    def opened(self, timeout: float = 10) -> int | None:
        assert self._opened.wait(timeout), "the stream did not open"
        return self.status

    def next_event(self, timeout: float) -> dict | None:
        line = self.lines.get(timeout=timeout)
        return None if line is None else json.loads(line)

    def close(self) -> None:
        self.session.close()


def watch_leases(proxy: FaultProxy, **params: str) -> Stream:
    return Stream(proxy.url + LEASES.path(), {"watch": "true", **params})


def test_pass_forwards_a_list_and_streams_watch_events(emu: KubeEmulator, proxy: FaultProxy) -> None:
    emu.create(lock_lease(NS, "TerraformMachine", "web", who="alice@laptop"))
    resp = requests.get(proxy.url + LEASES.path(), params={"labelSelector": "tfstate=true"}, timeout=5)
    assert resp.status_code == 200, resp.text
    assert [o["metadata"]["name"] for o in resp.json()["items"]] == \
        [o["metadata"]["name"] for o in emu.list("leases")]
    entry = proxy.log()[-1]
    assert (entry.method, entry.path, entry.query, entry.status, entry.mode) == \
        ("GET", LEASES.path(), {"labelSelector": "tfstate=true"}, 200, "pass")
    assert entry.is_resource("leases") and not entry.is_resource("pods")

    stream = watch_leases(proxy)
    try:
        assert stream.opened() == 200
        first = stream.next_event(5)  # kmock re-sends the stored object as ADDED
        assert first and first["type"] == "ADDED", first
        emu.wait_watched(["leases"])
        # the stream never ends, so an event that arrives at all was forwarded chunk by chunk
        t0 = time.monotonic()
        emu.create(lock_lease(NS, "TerraformMachine", "db", who="bob@desk"))
        ev = stream.next_event(5)
        assert ev and ev["type"] == "ADDED", ev
        assert ev["object"]["metadata"]["name"] == lock_lease(NS, "TerraformMachine", "db")["metadata"]["name"]
        print(f"watch event through the proxy after {time.monotonic() - t0:.3f} s")
        assert proxy.log(resource="leases")[-1].watch
    finally:
        stream.close()


def test_hang_answers_nothing_freezes_streams_and_resumes(emu: KubeEmulator, proxy: FaultProxy) -> None:
    stream = watch_leases(proxy)
    try:
        assert stream.opened() == 200
        emu.wait_watched(["leases"])
        t_hang = proxy.hang()
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get(proxy.url + LEASES.path(), timeout=(2, 1.5))
        held = proxy.log(since=t_hang)
        assert len(held) == 1 and held[0].mode == "hang" and held[0].status is None, held
        # the open watch is frozen: an event written now does not come through
        emu.create(lock_lease(NS, "TerraformMachine", "frozen", who="carol@ws"))
        with pytest.raises(queue.Empty):
            stream.next_event(1.5)
        # a request held while hanging proceeds when the mode changes
        result: dict[str, requests.Response] = {}
        waiter = threading.Thread(target=lambda: result.setdefault(
            "r", requests.get(proxy.url + LEASES.path(), timeout=15)), daemon=True)
        waiter.start()
        wait_for(lambda: len(proxy.log(since=t_hang)) == 2, 5, "the second request to reach the proxy")
        proxy.pass_()
        waiter.join(10)
        assert result["r"].status_code == 200 and len(result["r"].json()["items"]) == 1
        # and the frozen stream resumes with the event it held
        ev = stream.next_event(5)
        assert ev and ev["type"] == "ADDED", ev
        # the first held request's client gave up: its handler was cancelled, never answered
        wait_for(lambda: proxy.log(since=t_hang)[0].client_gone, 5, "the abandoned request to be noticed")
        assert proxy.log(since=t_hang)[0].status is None
    finally:
        stream.close()


@pytest.mark.parametrize("code,retry_after", [(503, None), (429, 7), (500, None)])
def test_status_answers_the_code_and_ends_open_streams(emu: KubeEmulator, proxy: FaultProxy, code: int,
                                                       retry_after: int | None) -> None:
    stream = watch_leases(proxy)
    try:
        assert stream.opened() == 200
        emu.wait_watched(["leases"])
        t = proxy.status(code, retry_after=retry_after)
        # the open stream ends cleanly
        assert stream.next_event(5) is None and stream.error is None, stream.error
        for params in ({}, {"watch": "true", "resourceVersion": "1"}):
            resp = requests.get(proxy.url + LEASES.path(NS), params=params, timeout=5)
            assert resp.status_code == code
            body = resp.json()
            assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == code, body
            assert body["reason"] == {503: "ServiceUnavailable", 429: "TooManyRequests",
                                      500: "InternalError"}[code]
            if code == 429:
                assert resp.headers["Retry-After"] == "7"
                assert body["details"]["retryAfterSeconds"] == 7
            else:
                assert "Retry-After" not in resp.headers
        log = proxy.log(since=t, resource="leases")
        assert [(r.mode, r.status, r.watch) for r in log] == [("status", code, False), ("status", code, True)]
        proxy.pass_()
        assert requests.get(proxy.url + LEASES.path(), timeout=5).status_code == 200
    finally:
        stream.close()


def test_429_has_a_default_retry_after(proxy: FaultProxy) -> None:
    proxy.status(429)
    resp = requests.get(proxy.url + LEASES.path(), timeout=5)
    assert resp.status_code == 429 and resp.headers["Retry-After"] == "1"


def test_watch_timeout_seconds_is_honoured(emu: KubeEmulator, proxy: FaultProxy) -> None:
    t0 = time.monotonic()
    stream = watch_leases(proxy, timeoutSeconds="1")
    try:
        assert stream.opened() == 200
        assert stream.next_event(5) is None and stream.error is None, stream.error
        took = time.monotonic() - t0
        assert 0.9 <= took < 3, took
    finally:
        stream.close()
