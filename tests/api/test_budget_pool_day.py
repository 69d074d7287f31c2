"""Pools refuse, runs live (issue 14, acceptance 2): a pooled DAY budget shared by 10 runs,
spent, refuses every further Reserve naming the pool, with RetryInfo to the next UTC midnight;
no run fails; the tenant stream shows the pool's threshold and exhaustion once each."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, pool_events
from tests.support.errors import rpc_error

RUNS = [f"run-{i}" for i in range(10)]


async def test_a_spent_day_pool_refuses_every_run_until_midnight_and_none_fails(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        "fleet",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        max_tokens=1000,
    )
    for run_id in RUNS:
        await budget.open_run(run_id, project_id="fleet", max_tokens=10_000)
    for run_id in RUNS:  # 10 x 100 spends the pool exactly
        hold = await budget.reserve(run_id, tokens=100)
        await budget.consume(run_id, hold.reservation.reservation_id, tokens=100)
    now = await db.fetchval("SELECT now()")
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    for run_id in RUNS:
        refused = await rpc_error(budget.reserve(run_id, tokens=1))
        assert (refused.code, refused.reason) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "BUDGET_EXHAUSTED",
        )
        assert (refused.metadata["scope"], refused.metadata["scopeId"]) == ("project", "fleet")
        retry = refused.require(error_details_pb2.RetryInfo).retry_delay.ToTimedelta()
        until = midnight - datetime.now(UTC)
        assert abs(retry - until) < timedelta(minutes=5)  # to the next UTC midnight
    for run_id in RUNS:
        run = await budget.get_run(run_id)
        assert run.state == pb.RUN_STATE_ACTIVE
        assert "cap.breached" not in [t for t, _ in await budget.trace(run_id)]
    events = await pool_events(budget, 2)
    assert [(e.event.type, e.pool_scope, e.pool_scope_id, e.event.run_id) for e in events] == [
        ("budget.threshold.crossed", pb.SCOPE_PROJECT, "fleet", ""),
        ("budget.exhausted", pb.SCOPE_PROJECT, "fleet", ""),
    ]
    assert json.loads(events[1].event.payload_json) == {
        "dimension": "tokens",
        "consumed": 1000,
        "limit": 1000,
    }
    assert events[0].project_id == "fleet"
    window = events[0].pool_window_start.ToDatetime(tzinfo=UTC)
    assert window == midnight - timedelta(days=1)
    # Once each: the rows of the pool's own log are exactly these two.
    assert await db.fetchval("SELECT count(*) FROM budget.pool_events") == 2


async def test_a_replay_after_midnight_writes_no_row_for_the_new_window(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    """A twin of yesterday's Reserve replays its stored reply and writes nothing: not even the
    pool's row for the new day (only a call decided anew opens it)."""
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT, "fleet", kind=pb.SCOPE_BUDGET_KIND_POOLED, window=pb.WINDOW_DAY
    )
    await budget.open_run("run-1", project_id="fleet", max_tokens=100)
    first = await budget.reserve("run-1", request_id="req-twin", tokens=5)
    # Midnight passes: the pool's row, and the hold drawing on it, are yesterday's.
    await db.execute(
        "UPDATE budget.pool_balances SET window_start = window_start - interval '1 day'"
    )
    await db.execute(
        "UPDATE budget.holds SET pool_windows ="
        " ARRAY(SELECT w - interval '1 day' FROM unnest(pool_windows) AS w)"
    )
    windows = "SELECT array_agg(window_start ORDER BY window_start) FROM budget.pool_balances"
    yesterday = await db.fetchval(windows)
    assert len(yesterday) == 1
    assert await budget.reserve("run-1", request_id="req-twin", tokens=5) == first
    assert await db.fetchval(windows) == yesterday
    # A new call opens today's window.
    await budget.reserve("run-1", tokens=5)
    assert await db.fetchval(windows) == [*yesterday, yesterday[0] + timedelta(days=1)]
