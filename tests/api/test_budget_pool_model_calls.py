"""Model calls per window (issue 14 item 6): a pooled budget bounds how many model calls its
runs make per window. Each Reserve naming a model holds one call on the pool, Consume records
it, Release frees it; a tool call is not one. The pool refuses (BUDGET_HELD, then
BUDGET_EXHAUSTED with RetryInfo to the next minute) while its runs stay ACTIVE, and its own
events name the dimension "modelCalls" on the tenant stream, never in a run's log."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import UTC, timedelta

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from budget_service.domain.policy import Window
from ration.budget.v1 import budget_pb2 as pb
from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetPolicy,
    Dimension,
    Scope,
    ScopeBudgetKind,
)
from ration_client import Window as ClientWindow
from tests.support.audits import assert_ledger_matches_balances
from tests.support.budget import Budget, pool_events
from tests.support.errors import rpc_error
from tests.support.servers import StartServer
from tests.support.windows import window_end, window_start


async def clear_of_a_minute_boundary(db: asyncpg.Connection, seconds_needed: int = 15) -> None:
    """Waits into the next minute when this one ends too soon, so the steps share one window."""
    second = (await db.fetchval("SELECT now()")).second
    if second >= 60 - seconds_needed:
        await asyncio.sleep(61 - second)


def model_calls_of(statuses: Iterable[pb.DimensionStatus]) -> list[pb.DimensionStatus]:
    return [d for d in statuses if d.dimension == pb.DIMENSION_MODEL_CALLS]


async def test_a_minute_pool_bounds_model_calls_of_every_run_and_no_run_fails(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    stored = await budget.put_scope(
        pb.SCOPE_PROJECT,
        "rate",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_MINUTE,
        max_model_calls=3,
    )
    assert stored.HasField("max_model_calls")
    assert stored.max_model_calls == 3
    for run_id in ("a", "b"):
        await budget.open_run(run_id, project_id="rate", max_tokens=10_000)
    await clear_of_a_minute_boundary(db)
    minute = window_start(Window.MINUTE, await db.fetchval("SELECT now()"))
    minute_end = window_end(Window.MINUTE, minute)
    assert minute_end is not None

    first = await budget.reserve("a", tokens=10)
    second = await budget.reserve("b", tokens=10)
    third = await budget.reserve("a", tokens=10)
    (status,) = model_calls_of(third.dimensions)
    assert (status.limit, status.consumed, status.held, status.remaining) == (3, 0, 3, 0)
    assert (status.binding_scope, status.binding_scope_id) == (pb.SCOPE_PROJECT, "rate")
    # A tool call names no model: it is no model call, so the full pool does not hold it up.
    tool = await budget.reserve("b", model="", tool_calls=1)
    assert await db.fetchval("SELECT held_model_calls FROM budget.pool_balances") == 3

    held = await rpc_error(budget.reserve("b", tokens=10))
    assert (held.code, held.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_HELD")
    assert held.metadata == {
        "dimension": "modelCalls",
        "limit": "3",
        "consumed": "0",
        "held": "3",
        "requested": "1",
        "scope": "project",
        "scopeId": "rate",
    }
    await budget.release("a", third.reservation.reservation_id)  # frees its held call
    fourth = await budget.reserve("b", tokens=10)

    check = await budget.check("a", model="gpt-4o", tokens=1)
    assert (check.would_grant, check.refusal_reason) == (False, "BUDGET_HELD")
    (status,) = model_calls_of(check.dimensions)
    assert (status.limit, status.consumed, status.held) == (3, 0, 3)
    assert status.window_end.ToDatetime(tzinfo=UTC) == minute_end
    assert model_calls_of(check.dimensions[:4]) == []  # the run's own four never include it

    for run_id, hold in (("a", first), ("b", second), ("b", fourth)):
        await budget.consume(run_id, hold.reservation.reservation_id, tokens=10)
    await budget.consume("b", tool.reservation.reservation_id, model="", tool_calls=1)

    spent = await rpc_error(budget.reserve("a", tokens=1))
    assert (spent.code, spent.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXHAUSTED")
    assert spent.metadata == {
        "dimension": "modelCalls",
        "limit": "3",
        "observed": "4",
        "scope": "project",
        "scopeId": "rate",
    }
    retry = spent.require(error_details_pb2.RetryInfo).retry_delay.ToTimedelta()
    now = await db.fetchval("SELECT now()")
    assert timedelta(0) < retry <= timedelta(minutes=1)
    assert abs(retry - (minute_end - now)) < timedelta(seconds=5)  # to the next minute
    # Usage the provider billed is recorded all the same, and a tool call still goes through.
    await budget.consume("b", tokens=5)
    assert (await budget.reserve("a", model="", tool_calls=1)).reservation.granted.tool_calls == 1

    reply = await budget.stub.GetScopeBudget(
        pb.GetScopeBudgetRequest(
            scope=pb.SCOPE_PROJECT, scope_id="rate", kind=pb.SCOPE_BUDGET_KIND_POOLED
        )
    )
    (status,) = model_calls_of(reply.balance.dimensions)
    assert (status.limit, status.consumed, status.held, status.remaining) == (3, 4, 0, 0)

    for run_id in ("a", "b"):
        assert (await budget.get_run(run_id)).state == pb.RUN_STATE_ACTIVE
        events = await budget.events(run_id)  # each payload checked against OpenWOP's schema
        assert "cap.breached" not in [e.type for e in events]
        assert all("modelCalls" not in e.payload_json for e in events)
    found = await pool_events(budget, 2)
    assert [(e.event.type, e.pool_scope, e.pool_scope_id, e.event.run_id) for e in found] == [
        ("budget.threshold.crossed", pb.SCOPE_PROJECT, "rate", ""),
        ("budget.exhausted", pb.SCOPE_PROJECT, "rate", ""),
    ]
    assert [json.loads(e.event.payload_json) for e in found] == [
        {"dimension": "modelCalls", "consumed": 3, "limit": 3, "percent": 80},
        {"dimension": "modelCalls", "consumed": 3, "limit": 3},
    ]
    assert found[1].event.budget_exhausted.dimension == pb.DIMENSION_MODEL_CALLS
    # Once per pool, window and dimension: the fourth call recorded added none.
    assert await db.fetchval("SELECT count(*) FROM budget.pool_events") == 2
    await assert_ledger_matches_balances(db)


async def test_closing_a_run_and_expiry_drop_its_held_model_calls(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT, "p", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_model_calls=2
    )
    await budget.open_run("closing", project_id="p")
    await budget.open_run("expiring", project_id="p")
    await budget.reserve("closing", tokens=1)
    await budget.reserve("expiring", tokens=1, ttl_seconds=1)
    assert (await rpc_error(budget.reserve("closing", tokens=1))).reason == "BUDGET_HELD"
    await budget.close("closing")  # releases its open hold
    await asyncio.sleep(1.2)  # the other hold's expiry passes (database clock)
    await budget.reserve("expiring", tokens=1)  # expires its own overdue hold first
    row = await db.fetchrow(
        "SELECT consumed_model_calls, held_model_calls FROM budget.pool_balances"
    )
    assert (row["consumed_model_calls"], row["held_model_calls"]) == (0, 1)
    await assert_ledger_matches_balances(db)


async def test_only_pooled_budgets_bound_model_calls(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    for kind, value, problem in [
        (pb.SCOPE_BUDGET_KIND_PER_RUN_CAP, 5, "only pooled budgets bound model calls"),
        (pb.SCOPE_BUDGET_KIND_POOLED, -1, ""),
    ]:
        refused = await rpc_error(
            budget.put_scope(pb.SCOPE_PROJECT, "p", kind=kind, max_model_calls=value)
        )
        assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
        violations = refused.require(error_details_pb2.BadRequest).field_violations
        assert [v.field for v in violations] == ["budget.max_model_calls"]
        assert problem in violations[0].description
    pool = await budget.put_scope(pb.SCOPE_PROJECT, "p", kind=pb.SCOPE_BUDGET_KIND_POOLED)
    assert not pool.HasField("max_model_calls")  # unbounded unless set


async def test_the_typed_client_sets_and_reports_model_calls(start_server: StartServer) -> None:
    runner = await start_server("budget")
    async with BudgetClient(f"127.0.0.1:{runner.port}") as budget:
        stored = await budget.put_scope_budget(
            Scope.PROJECT,
            "p",
            ScopeBudgetKind.POOLED,
            window=ClientWindow.HOUR,
            max_model_calls=1,
        )
        assert stored.max_model_calls == 1
        await budget.open_run("r", project_id="p", policy=BudgetPolicy(max_tokens=100))
        async with budget.call("r", model="gpt-4o", estimate=Amounts(tokens=10)) as reservation:
            await reservation.consume(Amounts(tokens=10))
        with pytest.raises(BudgetExhausted) as refused:
            await budget.reserve("r", model="gpt-4o", estimate=Amounts(tokens=1))
        error = refused.value
        assert (error.dimension, error.limit, error.observed) == (Dimension.MODEL_CALLS, 1, 2)
        assert (error.scope, error.scope_id) == (Scope.PROJECT, "p")
        retry = error.retry_after
        assert retry is not None
        assert timedelta(0) < retry <= timedelta(hours=1)
        pool = await budget.get_scope_budget(Scope.PROJECT, "p", ScopeBudgetKind.POOLED)
        assert pool.balance is not None
        calls = [s for s in pool.balance.dimensions if s.dimension is Dimension.MODEL_CALLS]
        assert [(s.limit, s.consumed, s.held, s.remaining) for s in calls] == [(1, 1, 0, 0)]
        run = await budget.get_run("r")
        assert [s.dimension for s in run.dimensions] == [
            Dimension.TOKENS,
            Dimension.COST,
            Dimension.TOOL_CALLS,
            Dimension.RETRIES,
        ]
        assert run.pools[-1].dimension is Dimension.MODEL_CALLS
        assert run.pools[-1].window_end is not None
        assert (run.pools[-1].binding_scope, run.pools[-1].binding_scope_id) == (Scope.PROJECT, "p")
