"""A tenant's report statements at once are bounded across replicas (issue 24): each takes one
of the tenant's RATION_BUDGET_REPORT_SLOTS_PER_TENANT slots (default 1), an advisory lock of
its own read transaction on the shared database (store/report_slots.py). While the slot is
held, by a report running on one replica or by any transaction that takes it, the tenant's
reports are RESOURCE_EXHAUSTED TOO_MANY_REPORTS (with RetryInfo) on every replica, and another
tenant's reports are served; once it is released, the tenant's are served again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest

from budget_service.store import report_slots
from ration_client import Amounts, BudgetClient, SpendGroupBy, TooManyReports
from tests.api.test_budget_spend_rollups import waiting_on_the_rollups
from tests.support.replicas import budget_processes
from tests.support.token_files import write_token_file

ROLES = ("reader", "writer")


@pytest.fixture
def addresses(database_url: str, tmp_path: Path) -> Iterator[list[str]]:
    """Two `ration budget serve` processes on one database, with tenants a and b, each with
    its own pools and a per-process cap of 2 reports a tenant (the default)."""
    tokens = write_token_file(tmp_path / "tokens.json", ("a", "a", ROLES), ("b", "b", ROLES))
    with budget_processes(database_url, RATION_TOKEN_FILE=str(tokens)) as procs:
        yield [p.addresses["budget"] for p in procs]


@contextlib.asynccontextmanager
async def clients(addresses: list[str], token: str) -> AsyncIterator[list[BudgetClient]]:
    found = [BudgetClient(address, token=token) for address in addresses]
    try:
        yield found
    finally:
        for client in found:
            await client.close()


async def refused(client: BudgetClient, window: tuple[datetime, datetime]) -> TooManyReports:
    with pytest.raises(TooManyReports) as caught:
        await client.report_spend(*window, SpendGroupBy.PROJECT)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.retry_after is not None
    return caught.value


async def test_a_held_slot_refuses_the_tenants_reports_on_every_replica_and_no_other(
    addresses: list[str], db: asyncpg.Connection
) -> None:
    now: datetime = await db.fetchval("SELECT now()")
    window = (now - timedelta(hours=1), now + timedelta(hours=1))
    async with clients(addresses, "a") as a, clients(addresses, "b") as b:
        for tenant in (a, b):
            await tenant[0].open_run("r", project_id="p")
            await tenant[1].consume("r", model="m", usage=Amounts(tokens=5))
        # Another transaction takes a's one slot, as a report of a's does.
        async with db.transaction():
            assert await report_slots.take(db, "a", 1)
            for replica in a:
                assert (await refused(replica, window)).limit == 1
            for replica in b:
                page = await replica.report_spend(*window, SpendGroupBy.PROJECT)
                assert [(r.key, r.tokens) for r in page.rows] == [("p", 5)]
        for replica in a:  # released with its transaction
            page = await replica.report_spend(*window, SpendGroupBy.PROJECT)
            assert [(r.key, r.tokens) for r in page.rows] == [("p", 5)]


async def test_a_running_report_holds_the_slot_against_the_other_replica(
    addresses: list[str], db: asyncpg.Connection, database_url: str
) -> None:
    """A report of a's held up in the database (a lock the test takes on the rollups) holds
    a's slot: the other replica refuses a's next report at once; the slot frees when the
    held report ends."""
    now: datetime = await db.fetchval("SELECT now()")
    window = (now - timedelta(hours=1), now + timedelta(hours=1))
    probe = await asyncpg.connect(database_url)
    try:
        async with clients(addresses, "a") as a:
            async with db.transaction():
                await db.execute("LOCK TABLE budget.spend_rollups IN ACCESS EXCLUSIVE MODE")
                held = asyncio.create_task(a[0].report_spend(*window, SpendGroupBy.MODEL))
                await waiting_on_the_rollups(db, 1)
                assert (await refused(a[1], window)).limit == 1
                async with probe.transaction():
                    assert not await report_slots.take(probe, "a", 1)
            assert not (await held).rows  # a has no spend: the report only had to run
            assert not (await a[1].report_spend(*window, SpendGroupBy.MODEL)).rows
    finally:
        await probe.close()


async def test_a_tenant_past_its_share_of_report_time_waits_and_another_does_not(
    database_url: str, tmp_path: Path, db: asyncpg.Connection
) -> None:
    """Each process gives a tenant's reports RATION_BUDGET_REPORT_SHARE_PERCENT of one core's
    time (1 % here: a bucket of 80 ms): a report loop is refused TOO_MANY_REPORTS with
    RetryInfo once it took that, while another tenant's report is served at once; the client's
    report_spend_all waits the refusal out."""
    tokens = write_token_file(tmp_path / "tokens.json", ("a", "a", ROLES), ("b", "b", ROLES))
    settings = {"RATION_TOKEN_FILE": str(tokens), "RATION_BUDGET_REPORT_SHARE_PERCENT": "1"}
    with budget_processes(database_url, 1, **settings) as procs:
        address = procs[0].addresses["budget"]
        now: datetime = await db.fetchval("SELECT now()")
        window = (now - timedelta(days=30), now + timedelta(hours=1))
        async with BudgetClient(address, token="a") as a, BudgetClient(address, token="b") as b:

            async def loop() -> None:
                for _ in range(500):
                    await a.report_spend(*window, SpendGroupBy.HOUR)

            with pytest.raises(TooManyReports) as caught:
                await loop()
            assert caught.value.retry_after is not None
            assert caught.value.retry_after.total_seconds() > 0
            assert "share" in str(caught.value)
            await b.report_spend(*window, SpendGroupBy.HOUR)  # b's share is untouched
            # The client's whole-report helper waits out the refusal (RetryInfo) and goes on.
            assert await a.report_spend_all(*window, SpendGroupBy.HOUR) == []
