"""Budget use case of spend reports: one page of sums, read in the caller's tenant."""

from __future__ import annotations

import asyncpg

from budget_service.domain.spend import SpendPage, SpendQuery, sums_overflow
from budget_service.store import reports as store
from budget_service.usecases.transactions import Transactions
from servicekit.errors import validation_error


class SpendReports:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

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

        page = await self._tx.read(tenant, work)
        overflow = sums_overflow(page.rows)
        if overflow:
            raise validation_error(overflow)
        return page
