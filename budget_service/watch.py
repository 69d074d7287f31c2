"""Live run events: one LISTEN connection per process fanning out to per-run subscribers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator

import asyncpg

log = logging.getLogger(__name__)
# The listening connection's application_name, so operators (and tests) can find it.
LISTENER_NAME = "ration-budget-listener"


class Subscription:
    """Woken when the run may have new events; the events table stays the source of truth."""

    def __init__(self) -> None:
        self._woken = asyncio.Event()

    def wake(self) -> None:
        self._woken.set()

    def clear(self) -> None:
        """Called before each read of the table, so a wake during the read is not lost."""
        self._woken.clear()

    async def wait(self) -> None:
        await self._woken.wait()


class EventHub:
    """Notifications carry [tenant, run_id, last_seq]; subscribers re-read the table after
    their last delivered seq on every wake, so nothing is missed or delivered twice. After a
    listener reconnect every subscriber is woken: notifications sent meanwhile are lost."""

    def __init__(self, url: str, channel: str, *, ping_seconds: float = 5.0) -> None:
        self._url = url
        self._channel = channel
        self._ping_seconds = ping_seconds
        self._subscribers: dict[tuple[str, str], set[Subscription]] = {}
        self._conn: asyncpg.Connection | None = None
        self.closed = False
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def subscribe(self, tenant: str, run_id: str) -> Iterator[Subscription]:
        key, subscription = (tenant, run_id), Subscription()
        self._subscribers.setdefault(key, set()).add(subscription)
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(key, set())
            subscribers.discard(subscription)
            if not subscribers:
                self._subscribers.pop(key, None)

    def _wake_all(self) -> None:
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.wake()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            tenant, run_id, _seq = json.loads(payload)
        except (ValueError, TypeError):
            log.warning("ignoring a malformed event notification")
            return
        for subscription in self._subscribers.get((tenant, run_id), ()):
            subscription.wake()

    async def run(self) -> None:
        """Background task: keep one listening connection, reconnecting with backoff."""
        delay = 0.1
        while not self.closed:
            try:
                await self._listen_once()
                delay = 0.1
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("event listener lost", extra={"error": type(exc).__name__})
            finally:
                self.listening.clear()
                await self._drop()
            if not self.closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _listen_once(self) -> None:
        lost = asyncio.Event()
        conn = await asyncpg.connect(
            self._url, timeout=10, server_settings={"application_name": LISTENER_NAME}
        )
        self._conn = conn
        conn.add_termination_listener(lambda _c: lost.set())
        await conn.add_listener(self._channel, self._on_notify)
        self.listening.set()
        self._wake_all()
        await self._until_lost(conn, lost)

    async def _until_lost(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        # A liveness probe, not a poll of events: a silently dead TCP peer never closes.
        while not lost.is_set() and not self.closed:
            try:
                await asyncio.wait_for(lost.wait(), self._ping_seconds)
            except TimeoutError:
                await conn.fetchval("SELECT 1", timeout=self._ping_seconds)

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), timeout=2)
            except Exception:  # closing a broken connection may fail in any way
                conn.terminate()

    async def close(self) -> None:
        """Ends every stream (they see `closed` when woken) and the listener."""
        self.closed = True
        self._wake_all()
        await self._drop()
