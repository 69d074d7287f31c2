"""Live run events: one LISTEN connection per process fanning out to per-run subscribers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg

from budget_service.store import watchers
from servicekit.db import Database
from servicekit.logs import error_text
from servicekit.tenancy import for_tenant

log = logging.getLogger(__name__)
# The listening connection's application_name, so operators (and tests) can find it.
LISTENER_NAME = "ration-budget-listener"
# Where WatchRunEvents listens: the engine (budget.write_records_v2, for decisions and lifecycle)
# notifies it with the JSON [tenant, run_id, last_seq] when a watched run gets events.
EVENTS_CHANNEL = "ration_budget_events"


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


async def _register_as_tenant(db: Database, key: watchers.Key, hub_id: str) -> None:
    """Registering reads the run, so it runs as the run's tenant (row-level security)."""
    await for_tenant(db, key[0]).transaction(lambda conn: watchers.register(conn, key, hub_id))


class EventHub:
    """Notifications carry [tenant, run_id, last_seq]; subscribers re-read the table after
    their last delivered seq on every wake, so nothing is missed or delivered twice. After a
    listener reconnect every subscriber is woken: notifications sent meanwhile are lost.

    Only watched runs are notified: a subscription registers its run in budget.watchers (see
    store/watchers.py) before the subscriber's first read, and the channel is LISTENed to only while
    someone watches. Starting to listen wakes every subscriber, so one that subscribed while
    the listener was (re)connecting misses nothing either.

    Polling instead (wakeup "poll", or "auto" on Citus): no listener, no watcher rows; see
    _poll_until_closed."""

    def __init__(
        self,
        url: str,
        channel: str,
        db: Database | None = None,
        *,
        ping_seconds: float = 5.0,
        wakeup: str = "auto",
        poll_seconds: float = 0.1,
    ) -> None:
        self._url = url
        self._wakeup = wakeup  # notify | poll | auto (poll on Citus)
        self._poll_seconds = poll_seconds
        # Decided when the hub starts (see _poll_until_closed).
        self.polling = False
        self._channel = channel
        self._db = db  # where watchers are registered; None only for hubs nobody subscribes to
        self._ping_seconds = ping_seconds
        self._subscribers: dict[watchers.Key, set[Subscription]] = {}
        self._conn: asyncpg.Connection | None = None
        self.closed = False
        self.listening = asyncio.Event()
        self._changed = asyncio.Event()  # subscribers came or went, or the connection was lost
        self.hub_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._registered: set[watchers.Key] = set()
        self._registering = asyncio.Lock()  # registrations and removals, one at a time

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, run_id: str) -> AsyncIterator[Subscription]:
        """A subscription to the run's notifications, registered before it is handed out."""
        key, subscription = (tenant, run_id), Subscription()
        self._subscribers.setdefault(key, set()).add(subscription)
        self._changed.set()
        try:
            await self._register(key)
            yield subscription
        finally:
            subscribers = self._subscribers.get(key, set())
            subscribers.discard(subscription)
            if not subscribers:
                self._subscribers.pop(key, None)
                self._changed.set()  # the listener task removes the registration

    async def _register(self, key: watchers.Key) -> None:
        if self.polling:
            return  # nothing notifies: the poll finds the run's new events
        if self._db is None:
            raise RuntimeError("this event hub has no database to register watchers in")
        db = self._db
        async with self._registering:
            if key not in self._registered:
                await _register_as_tenant(db, key, self.hub_id)
                self._registered.add(key)

    async def _sync_registrations(self, refresh: bool) -> None:
        """Forgets runs nobody here watches any more; on `refresh`, keeps the others' rows
        fresh and writes again (waking their subscribers) any the sweeper purged."""
        if self._db is None:
            return
        db, hub = self._db, self.hub_id
        async with self._registering:
            gone = self._registered - self._subscribers.keys()
            if gone:
                await db.upkeep_transaction(lambda conn: watchers.forget(conn, gone, hub))
                self._registered -= gone
            if not refresh or not self._registered:
                return
            kept = set(self._registered)
            missing = await db.upkeep_transaction(lambda conn: watchers.refresh(conn, kept, hub))

            for key in missing:
                await _register_as_tenant(db, key, hub)
        for key in missing:
            for subscription in self._subscribers.get(key, ()):
                subscription.wake()

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
                log.warning("event listener lost", extra={"error": error_text(exc)})
            except Exception as exc:  # e.g. STORE_UNAVAILABLE while registering: retried
                log.warning("event listener failed", extra={"error": error_text(exc)})
            finally:
                self.listening.clear()
                await self._drop()
            if not self.closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _listen_once(self) -> None:
        if self._db is not None and (
            self._wakeup == "poll"
            or (self._wakeup == "auto" and await self._db.read(watchers.on_citus))
        ):
            self.polling = True
            await self._poll_until_closed(self._db)
            return
        lost = asyncio.Event()
        conn = await asyncpg.connect(
            self._url, timeout=10, server_settings={"application_name": LISTENER_NAME}
        )
        self._conn = conn

        def on_lost(_conn: object) -> None:
            lost.set()
            self._changed.set()

        conn.add_termination_listener(on_lost)
        await self._until_lost(conn, lost)

    async def _until_lost(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        """LISTENs while there are subscribers, UNLISTENs when the last one leaves."""
        refreshed = time.monotonic()
        while not lost.is_set() and not self.closed:
            self._changed.clear()
            refresh = time.monotonic() - refreshed >= self._ping_seconds
            await self._sync_registrations(refresh)
            if refresh:
                refreshed = time.monotonic()
            wanted = bool(self._subscribers)
            if wanted and not self.listening.is_set():
                await conn.add_listener(self._channel, self._on_notify)
                self.listening.set()
                self._wake_all()
            elif not wanted and self.listening.is_set():
                await conn.remove_listener(self._channel, self._on_notify)
                self.listening.clear()
            try:
                # asyncio.timeout, not wait_for: on Python 3.11, wait_for returns the result and
                # drops a cancellation that arrives as the event is set (as it is when the
                # server stops), and this loop then outlived ServiceRunner.stop.
                async with asyncio.timeout(self._ping_seconds):
                    await self._changed.wait()
            except TimeoutError:
                # A liveness probe, not a poll of events: a silently dead peer never closes.
                await conn.fetchval("SELECT 1", timeout=self._ping_seconds)

    async def _poll_until_closed(self, db: Database) -> None:
        """Citus: a NOTIFY sent where a delegated decide_v2 runs (the worker holding the
        tenant's shard) never reaches a listener on the coordinator. So every poll interval,
        one single-shard read per tenant of the runs streamed here; a subscription is woken
        when its run's next_seq differs from the last one seen (also the first time, so an
        event written between a subscriber's first read and the first poll is not missed)."""
        seen: dict[watchers.Key, int] = {}
        self.listening.set()
        self._wake_all()
        while not self.closed:
            self._changed.clear()
            by_tenant: dict[str, list[str]] = {}
            for tenant, run_id in self._subscribers:
                by_tenant.setdefault(tenant, []).append(run_id)
            for tenant, run_ids in by_tenant.items():
                found = await for_tenant(db, tenant).read(
                    functools.partial(watchers.next_seqs, tenant=tenant, run_ids=run_ids)
                )
                for run_id, next_seq in found.items():
                    key = (tenant, run_id)
                    if seen.get(key) != next_seq:
                        seen[key] = next_seq
                        for subscription in self._subscribers.get(key, ()):
                            subscription.wake()
            for key in seen.keys() - self._subscribers.keys():
                del seen[key]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_seconds):  # not wait_for: see _until_lost
                    await self._changed.wait()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                async with asyncio.timeout(2):  # not wait_for: see _until_lost
                    await conn.close()
            except Exception:  # closing a broken connection may fail in any way
                conn.terminate()

    async def close(self) -> None:
        """Ends every stream (they see `closed` when woken) and the listener, and forgets this
        process's watcher rows (the sweeper purges them anyway once they go stale)."""
        self.closed = True
        self._changed.set()
        self._wake_all()
        await self._drop()
        if self._db is not None and self._registered:
            keys, hub = set(self._registered), self.hub_id
            with contextlib.suppress(Exception):  # best effort: the database may be gone
                await self._db.upkeep_transaction(lambda conn: watchers.forget(conn, keys, hub))
