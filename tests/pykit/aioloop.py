"""``LoopThread``: a server whose asyncio loop runs in a daemon thread, driven from the test thread
(the kmock emulator, the integration suite's fault proxy)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable


class LoopThread:
    """Subclasses implement ``_serve()``: set up, call ``self._ready.set()`` once serving, then
    ``await self._stop.wait()`` and clean up.  ``start()`` returns once it serves (or raises what
    made it fail); ``stop()`` ends it; ``_call()`` runs a coroutine on its loop from the test thread.
    """

    #: How start/failure messages and the thread name call it.
    what = "loop thread"
    thread_name = "loop"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    async def _serve(self) -> None:
        raise NotImplementedError

    def start(self) -> Any:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.what} did not start within 10 s")
        if self._error is not None:
            raise RuntimeError(f"{self.what} failed to start") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            self._stop = asyncio.Event()
            await self._serve()

        try:
            loop.run_until_complete(main())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self._error = e
            self._ready.set()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001
                pass
            loop.close()

    def stop(self, timeout: float = 15.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    def _call(self, coro_fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``coro_fn()`` (a coroutine factory) on the loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro_fn(), self._loop).result(timeout)
