"""SIGINT/SIGTERM at any moment of a start: a flag from the first instant, an event in the loop."""

from __future__ import annotations

import contextlib
import signal
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # asyncio is imported where used: this module loads before anything heavy
    import asyncio
    from collections.abc import AsyncIterator, Awaitable
    from types import FrameType

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A stop was requested before the start (or the work) finished."""


class Stop:
    """Whether a stop was requested. No KeyboardInterrupt is ever raised: the signal only sets
    the flag, and each step of a start checks it, so every started part is stopped in order."""

    def __init__(self) -> None:
        self.requested = False
        self._event: asyncio.Event | None = None

    def install(self) -> None:
        """Plain handlers, for the moments outside an event loop (imports, before, after)."""
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def _request(self) -> None:
        self.requested = True
        if self._event is not None:
            self._event.set()

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Signals wake the running loop while inside the block."""
        import asyncio

        loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        if self.requested:
            self._event.set()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._request)
        try:
            yield
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
            self._event = None
            self.install()  # remove_signal_handler restored the default (KeyboardInterrupt)

    async def settle(self) -> None:
        """Runs the loop's pending callbacks, so that a signal that has already arrived is seen:
        the loop reads it from its wakeup pipe after callbacks that were queued before."""
        import asyncio

        for _ in range(3):
            await asyncio.sleep(0)

    def check(self) -> None:
        if self.requested:
            raise Interrupted

    async def wait(self) -> None:
        assert self._event is not None, "wait() only inside watching()"
        await self._event.wait()

    async def race(self, work: Awaitable[T]) -> T:
        """The work's result, or Interrupted (the work cancelled) if a stop comes first."""
        import asyncio

        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self.wait())
        try:
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise Interrupted
        return task.result()


# The process's one Stop: the console script installs it before importing anything else.
STOP = Stop()
