"""Budget use cases of the tenant event stream: pages in the tenant's order, followed live."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from budget_service.domain.records import PoolKey, RunRecord
from budget_service.domain.tenant_events import PollBackoff, Position, TenantEventFilter
from budget_service.store import tenant_events as store
from budget_service.store.reads import StoredEvent
from budget_service.usecases.stream_slots import StreamSlots
from servicekit.db import Database
from servicekit.errors import DomainError, FieldViolation, validation_error
from servicekit.tenancy import for_tenant

log = logging.getLogger(__name__)
T = TypeVar("T")

# Rows one read looks at, matching or not: bounds a read's work whatever the filter.
SCAN_LIMIT = 500


@dataclass(frozen=True)
class TenantEvent:
    """One event of the tenant's stream, with its run (owners, and the base of its payload),
    or a pool window's own event (threshold crossed, exhausted: `pool` set, `run` None)."""

    position: Position
    run: RunRecord | None
    event: StoredEvent
    pool: PoolKey | None = None


@dataclass(frozen=True)
class Checkpoint:
    """The stream read up to `position` and found nothing more that matches."""

    position: Position


TenantItem = TenantEvent | Checkpoint


@dataclass(frozen=True)
class TenantPage:
    """Matching events after a position, in order; `reached` is where the next read starts
    (after the last event, or past the non-matching ones read after it). `skipped_tail`: the
    read passed events that did not match after its last match (a checkpoint is worth it)."""

    events: list[TenantEvent]
    reached: Position
    skipped_tail: bool
    full: bool  # the read stopped at its row bound, not at the horizon


async def read_page(
    db: Database,
    tenant: str,
    after: Position,
    wanted: TenantEventFilter,
    limit: int = SCAN_LIMIT,
) -> TenantPage:
    """One read in the tenant's transaction (row-level security backs the tenant filter)."""

    async def work(conn: asyncpg.Connection) -> TenantPage:
        found = await store.scan(conn, tenant, after, wanted, limit)
        run_ids = [e.run_id for e in found.events if e.pool is None]
        runs = await store.runs_of(conn, tenant, run_ids)
        events = []
        for scanned in found.events:
            if scanned.pool is not None:
                events.append(TenantEvent(scanned.position, None, scanned.event, scanned.pool))
                continue
            run = runs.get(scanned.run_id)
            if run is None:  # runs are never deleted; an event without one is a store bug
                log.error("an event without its run was skipped", extra={"seq": scanned.seq})
                continue
            events.append(TenantEvent(scanned.position, run, scanned.event))
        return TenantPage(events, found.reached, found.skipped_tail, found.full)

    return await for_tenant(db, tenant).read(work)


async def latest(db: Database, tenant: str) -> Position:
    """What `start_at_latest` starts from: after every event of the transactions that had
    started writing by now (committed or not; a later one's events all come after it)."""
    return Position.before(
        await for_tenant(db, tenant).read(functools.partial(store.next_tx, tenant=tenant))
    )


def beyond_latest() -> DomainError:
    return validation_error(
        [FieldViolation("after_cursor", "is beyond the stream's current position")]
    )


class TenantStreams:
    """WatchTenantEvents: pages read by polling with backoff (no NOTIFY needed, so it works
    whichever process or node wrote the events), each stream holding one of the tenant's
    slots from before its first read until it ends.

    A client that goes away cancels its stream, usually in the middle of a read: each read
    runs to its end in a task of its own (bounded by the statement timeout) so that its
    transaction ends with COMMIT and its connection goes back to the pool clean, rather than
    being cut mid-statement (which asyncpg reports at ERROR when it resets the connection)."""

    def __init__(self, db: Database, slots: StreamSlots, backoff: PollBackoff) -> None:
        self._db = db
        self._slots = slots
        self._backoff = backoff
        self._finishing: set[asyncio.Task[Any]] = set()

    async def _uncut(self, work: Awaitable[T]) -> T:
        """`work`, left to finish in the background if the stream is cancelled meanwhile."""
        task = asyncio.ensure_future(work)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._finishing.add(task)
            task.add_done_callback(self._finished)
            raise

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._finishing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("a cancelled stream's read failed", exc_info=task.exception())

    async def watch(
        self, tenant: str, after: Position | None, wanted: TenantEventFilter
    ) -> AsyncGenerator[TenantItem, None]:
        """Every matching event after `after` (None: after the latest) exactly once, in the
        tenant's order, then live ones, until the client cancels or the server stops."""
        with self._slots.slot(tenant):
            now = await self._uncut(latest(self._db, tenant))
            if after is None:
                after = now
                yield Checkpoint(after)
            elif after > now:  # no stream ever sent it: it would wait for ids not yet given
                raise beyond_latest()
            position, delay = after, None
            while True:
                page = await self._uncut(read_page(self._db, tenant, position, wanted))
                for item in page.events:
                    yield item
                if page.skipped_tail:
                    yield Checkpoint(page.reached)
                position = page.reached
                delay = 0.0 if page.full else self._backoff.next(delay, bool(page.events))
                if delay:
                    await asyncio.sleep(delay)
