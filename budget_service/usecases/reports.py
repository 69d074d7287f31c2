"""Budget use case of spend reports: one page of sums, read in the caller's tenant.

Reports read on a pool of their own (a few connections with their own statement timeout),
never on the hot path's. A tenant runs at most a few at once on each server process, and at
most `statement_slots` report statements at once on the database, across every replica (each
holds one of the tenant's slots, an advisory lock of its read transaction:
store/report_slots.py); one more is RESOURCE_EXHAUSTED TOO_MANY_REPORTS with RetryInfo. So a
tenant's report loops cannot take the connections or the database time every tenant's Reserve
and Consume need, however many replicas they are spread over. Nor, one after another, all of
the time: each process gives a tenant's reports a share of its time (servicekit/timeshare.py,
RATION_BUDGET_REPORT_SHARE_PERCENT of one core, each report counted for at least
REPORT_MIN_SECONDS); past it, TOO_MANY_REPORTS with RetryInfo until the share refilled.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg

from budget_service.domain.spend import SpendPage, SpendQuery, sums_overflow
from budget_service.store import report_slots
from budget_service.store import reports as store
from budget_service.usecases.stream_slots import StreamSlots, too_many_reports
from servicekit.db import Database
from servicekit.errors import DomainError, ErrorKind, RetryDetail, validation_error
from servicekit.tenancy import for_tenant
from servicekit.timeshare import TimeShare

ACROSS_REPLICAS = "on the database (across replicas)"
# Each report counts for at least this long against its tenant's share (its call's own cost
# beside the statement's), and a tenant may bank this many seconds of its share (2 s of
# reports at 25 %, 0.4 s at the default 5 %: a dashboard's burst of pages).
REPORT_MIN_SECONDS = 0.001
REPORT_BURST_WINDOW_SECONDS = 8.0


def report_time_used(retry_seconds: float) -> DomainError:
    """TOO_MANY_REPORTS: the tenant's reports took their share of this process's time."""
    return DomainError(
        ErrorKind.EXHAUSTED,
        "TOO_MANY_REPORTS",
        "this tenant's spend reports took their share of this server's time; retry later",
        metadata={"limit": "time share"},
        detail=RetryDetail(round(retry_seconds, 3)),
    )


class SpendReports:
    def __init__(
        self, db: Database, slots: StreamSlots, statement_slots: int, share: float = 0.05
    ) -> None:
        self._db = db  # the reports' own pool, connected on first use
        self._slots = slots
        self._statement_slots = statement_slots
        self._time = TimeShare(share, share * REPORT_BURST_WINDOW_SECONDS, REPORT_MIN_SECONDS)
        self._connecting = asyncio.Lock()

    async def report(
        self, tenant: str, query: SpendQuery, after_key: str | None, page_size: int
    ) -> SpendPage:
        """The groups after `after_key` (the previous page's last), at most page_size of them.
        Read in one transaction that enters the tenant, so row-level security backs the
        tenant filter, and that first takes one of the tenant's report slots."""

        async def work(conn: asyncpg.Connection) -> SpendPage:
            if not await report_slots.take(conn, tenant, self._statement_slots):
                raise too_many_reports(self._statement_slots, ACROSS_REPLICAS)
            return await store.report_spend(conn, tenant, query, after_key, page_size)

        wait = self._time.wait_seconds(tenant)
        if wait > 0:
            raise report_time_used(wait)
        with self._slots.slot(tenant):
            if not self._db.ready:
                async with self._connecting:
                    await self._db.connect()  # opens no connection until one is asked for
            began = time.monotonic()
            try:
                page = await for_tenant(self._db, tenant).read(work)
            finally:
                self._time.spend(tenant, time.monotonic() - began)
        overflow = sums_overflow(page.rows)
        if overflow:
            raise validation_error(overflow)
        return page

    async def close(self) -> None:
        await self._db.close()
