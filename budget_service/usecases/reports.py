"""Budget use case of spend reports: one page of sums, read in the caller's tenant.

Reports read on a pool of their own (a few connections with their own statement timeout),
never on the hot path's, and a tenant runs at most a few at once on each server process (one
more is RESOURCE_EXHAUSTED TOO_MANY_REPORTS with RetryInfo): a tenant's report loops cannot
take the connections or the database time every tenant's Reserve and Consume need.
"""

from __future__ import annotations

import asyncio

import asyncpg

from budget_service.domain.spend import SpendPage, SpendQuery, sums_overflow
from budget_service.store import reports as store
from budget_service.usecases.stream_slots import StreamSlots
from servicekit.db import Database
from servicekit.errors import validation_error
from servicekit.tenancy import for_tenant


class SpendReports:
    def __init__(self, db: Database, slots: StreamSlots) -> None:
        self._db = db  # the reports' own pool, connected on first use
        self._slots = slots
        self._connecting = asyncio.Lock()

    async def report(
        self, tenant: str, query: SpendQuery, after_key: str | None, page_size: int
    ) -> SpendPage:
        """The groups after `after_key` (the previous page's last), at most page_size of them.
        Read in one transaction that enters the tenant, so row-level security backs the
        tenant filter."""

        async def work(conn: asyncpg.Connection) -> SpendPage:
            found = await store.report_spend(conn, tenant, query, after_key, page_size + 1)
            page = found[:page_size]
            more = len(found) > page_size
            return SpendPage(page, page[-1].key if more else None)

        with self._slots.slot(tenant):
            if not self._db.ready:
                async with self._connecting:
                    await self._db.connect()  # opens no connection until one is asked for
            page = await for_tenant(self._db, tenant).read(work)
        overflow = sums_overflow(page.rows)
        if overflow:
            raise validation_error(overflow)
        return page

    async def close(self) -> None:
        await self._db.close()
