"""Spend rollups (DESIGN 3.10): kept by every Consume in its own transaction, they always equal
the ledger, and ReportSpend read from them gives the ledger's sums for any window, grouping,
filter and page size (its partial hours summed from the ledger), end-user, API-key and tag ones
included."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ration_client import Amounts, BudgetClient, SpendGroupBy, TooManyReports
from tests.support.budget import ROLLUPS_OF_LEDGER
from tests.support.servers import StartServer

PROJECTS = ("p-one", "p-two")
WORKFLOWS = ("wf", "")
AGENTS = ("agent", "")
MODELS = ("gpt-4o", "claude-3-5-sonnet", "")  # "": a tool call, no model
END_USERS = ("cust-1", "cust-2", "")
TAG_SETS: tuple[dict[str, str], ...] = (
    {},
    {"plan": "pro"},
    {"plan": "free", "team": "red"},
    {"team": "red"},
)
TAG_KEY = "plan"
# The tenant's token: the test opens some runs with an issued key (not in development mode).
TOKEN = "admin-of-dev"
Totals = tuple[int, int, int, int, int]  # cost nanos, tokens, tool calls, retries, consumes
_runs = itertools.count()

# The ledger summed directly (the reports' SQL before the rollups): the oracle.
_LEDGER_KEYS = {
    SpendGroupBy.PROJECT: "r.project_id",
    SpendGroupBy.WORKFLOW: "r.workflow_id",
    SpendGroupBy.AGENT: "r.agent_id",
    SpendGroupBy.MODEL: "coalesce(l.model, '')",
    SpendGroupBy.DAY: "to_char(date_trunc('day', l.created_at AT TIME ZONE 'UTC'),"
    """ 'YYYY-MM-DD"T"HH24:MI:SS"Z"')""",
    SpendGroupBy.HOUR: "to_char(date_trunc('hour', l.created_at AT TIME ZONE 'UTC'),"
    """ 'YYYY-MM-DD"T"HH24:MI:SS"Z"')""",
    SpendGroupBy.END_USER: "r.end_user_id",
    SpendGroupBy.API_KEY: "r.api_key_id",
    SpendGroupBy.TAG: f"coalesce(r.tags ->> '{TAG_KEY}', '')",
}
_LEDGER_SUMS = """
SELECT {key} AS key, sum(l.consumed_cost_nanos) AS cost_nanos, sum(l.consumed_tokens) AS tokens,
    sum(l.consumed_tool_calls) AS tool_calls, sum(l.consumed_retries) AS retries, count(*) AS n
FROM budget.ledger l JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
WHERE l.tenant_id = 'dev' AND l.decision = 'consume' AND l.created_at >= $1
  AND l.created_at < $2 AND ($3::text IS NULL OR r.project_id = $3)
  AND ($4::text IS NULL OR l.model = $4) AND ($5::text IS NULL OR r.end_user_id = $5)
  AND ($6::text IS NULL OR r.api_key_id = $6)
GROUP BY 1"""
# The rollups summed over their buckets (migration 0019): one row per group, as the oracle.
_ROLLUPS = """
SELECT tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,
    tags_sha256, tags, sum(cost_nanos), sum(tokens), sum(tool_calls), sum(retries),
    sum(consume_count)
FROM budget.spend_rollups
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9"""


def token_file(path: Path, rows: tuple[tuple[str, str], ...] | None = None) -> Path:
    rows = rows or (("writer-a", "a"), ("writer-b", "b"))
    roles = ["reader", "writer", "admin"]
    document = {
        "tokens": [
            {"sha256": hashlib.sha256(t.encode()).hexdigest(), "tenant": tenant, "roles": roles}
            for t, tenant in rows
        ]
    }
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
async def address(start_server: StartServer, tmp_path: Path) -> str:
    tokens = token_file(tmp_path / "tokens.json", ((TOKEN, "dev"),))
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    return f"127.0.0.1:{runner.port}"


@pytest.fixture
async def budget(address: str) -> AsyncIterator[BudgetClient]:
    async with BudgetClient(address, token=TOKEN) as client:
        yield client


consumes = st.lists(
    st.tuples(
        st.integers(0, 3),  # which of the example's runs
        st.sampled_from(MODELS),
        st.integers(0, 10**6),  # tokens
        st.integers(0, 10**10),  # cost nanos
        st.integers(0, 2),  # tool calls
        st.integers(0, 1),  # retries
        st.booleans(),  # settles a hold first
    ),
    min_size=1,
    max_size=10,
)
# A window around the database's now, in minutes: its ends on or off the hour.
windows = st.tuples(st.integers(-24 * 60, 90), st.integers(1, 24 * 60))


async def ledger_sums(
    db: asyncpg.Connection,
    group: SpendGroupBy,
    window: tuple[datetime, datetime],
    project: str | None,
    model: str | None,
    end_user: str | None = None,
    key: str | None = None,
) -> dict[str, Totals]:
    query = _LEDGER_SUMS.format(key=_LEDGER_KEYS[group])
    rows = await db.fetch(query, *window, project, model, end_user, key)
    return {
        r["key"]: (
            int(r["cost_nanos"]),
            int(r["tokens"]),
            int(r["tool_calls"]),
            int(r["retries"]),
            int(r["n"]),
        )
        for r in rows
    }


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(made=consumes, owners=st.data(), window=windows, on_the_hour=st.booleans())
async def test_rollups_and_reports_equal_the_ledger_after_any_mix_of_consumes(
    address: str,
    budget: BudgetClient,
    db: asyncpg.Connection,
    made: list[tuple[int, str, int, int, int, int, bool]],
    owners: st.DataObject,
    window: tuple[int, int],
    on_the_hour: bool,
) -> None:
    runs = []
    minted = await budget.create_api_key(["writer"])
    async with BudgetClient(address, token=minted.secret) as keyed:
        for _ in range(4):
            run_id = f"run-{next(_runs)}"
            opener = keyed if owners.draw(st.booleans(), label="with the key") else budget
            await opener.open_run(
                run_id,
                project_id=owners.draw(st.sampled_from(PROJECTS)),
                workflow_id=owners.draw(st.sampled_from(WORKFLOWS)),
                agent_id=owners.draw(st.sampled_from(AGENTS)),
                end_user_id=owners.draw(st.sampled_from(END_USERS)),
                tags=owners.draw(st.sampled_from(TAG_SETS)),
            )
            runs.append(run_id)
    for which, model, tokens, cost, tool_calls, retries, settle in made:
        run_id = runs[which]
        reservation_id = ""
        if settle and model:  # a hold is for a model call
            held = await budget.reserve(run_id, model=model, estimate=Amounts(tokens=1))
            reservation_id = held.reservation.reservation_id
        if not model:  # tokens and cost are a model call's
            tokens = cost = 0
        usage = Amounts(tokens=tokens, cost_nanos=cost, tool_calls=tool_calls, retries=retries)
        await budget.consume(run_id, usage=usage, model=model, reservation_id=reservation_id)

    # Every rollup row is its group's sum of the ledger, and every group has one.
    assert [tuple(r) for r in await db.fetch(_ROLLUPS)] == [
        tuple(r) for r in await db.fetch(ROLLUPS_OF_LEDGER)
    ]

    now: datetime = await db.fetchval("SELECT now()")
    everything = (now - timedelta(days=1), now + timedelta(hours=1))
    whole = await budget.report_spend_all(*everything, SpendGroupBy.MODEL)
    assert whole  # this example's consumes at least
    assert {r.key: r.consume_count for r in whole} == {
        key: sums[4]
        for key, sums in (await ledger_sums(db, SpendGroupBy.MODEL, everything, None, None)).items()
    }
    start = now + timedelta(minutes=window[0])
    if on_the_hour:
        start = start.replace(minute=0, second=0, microsecond=0)
    span = (start, start + timedelta(minutes=window[1]))
    project = owners.draw(st.sampled_from((None, *PROJECTS)), label="project filter")
    model_filter = owners.draw(st.sampled_from((None, *MODELS[:-1])), label="model filter")
    end_user = owners.draw(st.sampled_from((None, *END_USERS[:-1])), label="end-user filter")
    key = owners.draw(st.sampled_from((None, minted.key.key_id)), label="key filter")
    # Page by page: each page walks its keys from the last (store/reports.py).
    page_size = owners.draw(st.sampled_from((1, 2, 1000)), label="page size")
    for group in SpendGroupBy:
        rows = await budget.report_spend_all(
            *span,
            group,
            page_size=page_size,
            project_id=project or "",
            model=model_filter or "",
            end_user_id=end_user or "",
            api_key_id=key or "",
            tag_key=TAG_KEY if group is SpendGroupBy.TAG else "",
        )
        reported = {
            r.key: (r.cost_nanos, r.tokens, r.tool_calls, r.retries, r.consume_count) for r in rows
        }
        expected = await ledger_sums(db, group, span, project, model_filter, end_user, key)
        assert reported == expected, group


async def waiting_on_the_rollups(db: asyncpg.Connection, count: int) -> None:
    """Until `count` sessions wait for the lock on the rollups that the test holds."""
    while True:
        waiting = await db.fetchval(
            "SELECT count(*) FROM pg_locks"
            " WHERE relation = 'budget.spend_rollups'::regclass AND NOT granted"
        )
        if waiting >= count:
            return
        await asyncio.sleep(0.02)


async def test_reports_have_their_own_pool_and_a_cap_per_tenant(
    start_server: StartServer, db: asyncpg.Connection, tmp_path: Path
) -> None:
    """Reports held up in the database (a lock the test takes) fill neither the hot path's
    pool nor another tenant's share: a third report of the tenant is refused at once by the
    process's cap (the tenant's database slots, tests/api/test_budget_report_slots.py, are
    more here), the other tenant's report is let in, and Reserve and Consume go on."""
    runner = await start_server(
        "budget",
        RATION_TOKEN_FILE=str(token_file(tmp_path / "tokens.json")),
        RATION_DB_POOL_MAX="2",
        RATION_BUDGET_REPORT_POOL_MAX="4",
        RATION_BUDGET_MAX_REPORTS_PER_TENANT="2",
        RATION_BUDGET_REPORT_SLOTS_PER_TENANT="3",
    )
    address = f"127.0.0.1:{runner.port}"
    now: datetime = await db.fetchval("SELECT now()")
    window = (now - timedelta(hours=1), now + timedelta(hours=1))
    async with (
        BudgetClient(address, token="writer-a") as a,
        BudgetClient(address, token="writer-b") as b,
    ):
        await a.open_run("r", project_id="p")
        async with db.transaction():
            await db.execute("LOCK TABLE budget.spend_rollups IN ACCESS EXCLUSIVE MODE")
            held = [
                asyncio.create_task(a.report_spend_all(*window, SpendGroupBy.PROJECT))
                for _ in range(2)
            ]
            await waiting_on_the_rollups(db, 2)
            with pytest.raises(TooManyReports) as refused:  # one page: report_spend_all waits
                await a.report_spend(*window, SpendGroupBy.PROJECT)
            assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refused.value.limit == 2
            assert refused.value.retry_after is not None
            other = asyncio.create_task(b.report_spend_all(*window, SpendGroupBy.PROJECT))
            await waiting_on_the_rollups(db, 3)  # b's report got a connection of the pool
            for _ in range(3):  # the hot path's two connections are all free for it
                held_call = await a.reserve("r", model="m", estimate=Amounts(tokens=1))
                assert held_call.reservation.reservation_id
            assert (await a.get_run("r")).run_id == "r"
        for report in held:
            assert await report == []
        assert await other == []


async def session_of_bucket(database_url: str, other_than: int) -> asyncpg.Connection:
    """A session whose rollup bucket (pg_backend_pid() & 7, migration 0019) is not `other_than`."""
    spare = []
    try:
        while True:
            conn = await asyncpg.connect(database_url)
            if await conn.fetchval("SELECT pg_backend_pid() & 7") != other_than:
                return conn
            spare.append(conn)
    finally:
        for conn in spare:
            await conn.close()


async def test_concurrent_consumes_of_one_group_do_not_queue_on_one_rollup_row(
    budget: BudgetClient, db: asyncpg.Connection, database_url: str
) -> None:
    """Two transactions adding to the same group and hour write two bucket rows: the second
    does not wait for the first's commit (it would, past its lock timeout, on one row), and
    the rollups summed over the buckets still equal the ledger."""
    for run_id in ("hot-1", "hot-2"):
        await budget.open_run(run_id, project_id="hot")
    at: datetime = await db.fetchval("SELECT now()")
    consume = (
        "INSERT INTO budget.ledger (tenant_id, run_id, decision, request_id, model,"
        " policy_version, consumed_tokens, created_at)"
        " VALUES ('dev', $1, 'consume', $1, 'gpt-4o', 1, 5, $2)"
    )
    first_bucket: int = await db.fetchval("SELECT pg_backend_pid() & 7")
    other = await session_of_bucket(database_url, first_bucket)
    try:
        async with db.transaction():
            await db.execute(consume, "hot-1", at)
            async with other.transaction():
                await other.execute("SET LOCAL lock_timeout = '10s'")
                await other.execute(consume, "hot-2", at)
    finally:
        await other.close()
    rows = await db.fetch(
        "SELECT bucket, tokens FROM budget.spend_rollups WHERE project_id = 'hot' ORDER BY 1"
    )
    assert len(rows) == 2
    assert first_bucket in {r["bucket"] for r in rows}
    assert sum(r["tokens"] for r in rows) == 10
    assert [tuple(r) for r in await db.fetch(_ROLLUPS)] == [
        tuple(r) for r in await db.fetch(ROLLUPS_OF_LEDGER)
    ]
