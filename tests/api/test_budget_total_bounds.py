"""Running totals never leave int64: absurd usage is VALIDATION_FAILED, never INTERNAL."""

from __future__ import annotations

import asyncpg
import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, new_id
from tests.support.errors import RpcErrorDetails, decode, rpc_error

MAX_TOTAL = 2**63 - 1
EXA = 10**18  # the largest cost amount one call may carry, in nanos
MAX_TOKENS = 10**15  # the largest token amount one call may carry


def violations(error: RpcErrorDetails) -> list[str]:
    from google.rpc import error_details_pb2

    bad = error.detail(error_details_pb2.BadRequest)
    return [v.field for v in bad.field_violations] if bad else []


def assert_total_refused(error: RpcErrorDetails, field: str) -> None:
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    assert violations(error) == [field]


async def totals(db: asyncpg.Connection, run_id: str) -> tuple[int, int]:
    row = await db.fetchrow(
        "SELECT consumed_tokens, consumed_cost_nanos FROM budget.runs WHERE run_id = $1", run_id
    )
    return row["consumed_tokens"], row["consumed_cost_nanos"]


async def test_consume_past_int64_is_validation_failed_and_writes_nothing(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r")  # unbounded: the one-statement fast path takes every Consume
    for _ in range(9):
        await budget.consume("r", cost_nanos=EXA)
    request_id = new_id()
    refused = await rpc_error(budget.consume("r", request_id=request_id, cost_nanos=EXA))
    assert_total_refused(refused, "usage.cost_nanos")
    assert await totals(db, "r") == (0, 9 * EXA)
    assert await db.fetchval("SELECT count(*) FROM budget.ledger WHERE decision = 'consume'") == 9
    logged = "SELECT count(*) FROM budget.request_log WHERE request_id = $1"
    assert await db.fetchval(logged, request_id) == 0  # not stored: a retry is judged afresh
    await budget.consume("r", cost_nanos=MAX_TOTAL - 9 * EXA)  # exactly to the edge is fine
    assert await totals(db, "r") == (0, MAX_TOTAL)


async def test_a_pool_total_past_int64_refuses_the_consume_of_any_of_its_runs(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(pb.SCOPE_PROJECT, "p", kind=pb.SCOPE_BUDGET_KIND_POOLED)
    await budget.open_run("a", project_id="p")
    await budget.open_run("b", project_id="p")
    for _ in range(9):
        await budget.consume("a", cost_nanos=EXA)
    refused = await rpc_error(budget.consume("b", cost_nanos=EXA))  # fits b, not the pool
    assert_total_refused(refused, "usage.cost_nanos")
    assert await totals(db, "b") == (0, 0)
    pool = await db.fetchval("SELECT sum(consumed_cost_nanos) FROM budget.pool_balances")
    assert pool == 9 * EXA


async def test_holds_past_int64_are_validation_failed(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r")
    for _ in range(9):
        await budget.reserve("r", cost_nanos=EXA, ttl_seconds=600)
    refused = await rpc_error(budget.reserve("r", cost_nanos=EXA, ttl_seconds=600))
    assert_total_refused(refused, "estimate.cost_nanos")
    held = await db.fetchval("SELECT held_cost_nanos FROM budget.runs WHERE run_id = 'r'")
    assert held == 9 * EXA
    assert await db.fetchval("SELECT count(*) FROM budget.holds") == 9


async def test_resume_past_int64_is_validation_failed(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_cost_nanos=EXA, on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT)
    await budget.consume("r", cost_nanos=EXA)
    await budget.consume("r", cost_nanos=1)  # a breach: INTERRUPTED at 10^18 + 1
    for limit in range(2, 10):  # each approval raises by 10^18, then usage breaches again
        resumed = await budget.resume("r", cost_nanos=EXA)
        assert resumed.effective_budget.max_cost_nanos == limit * EXA
        await budget.consume("r", cost_nanos=EXA)
        assert (await budget.get_run("r")).state == pb.RUN_STATE_INTERRUPTED
    refused = await rpc_error(budget.resume("r", cost_nanos=EXA))  # 10 * 10^18 > 2^63 - 1
    assert_total_refused(refused, "delta.cost_nanos")
    run = await budget.get_run("r")
    assert (run.state, run.effective_budget.max_cost_nanos) == (pb.RUN_STATE_INTERRUPTED, 9 * EXA)
    edge = await budget.resume("r", cost_nanos=MAX_TOTAL - 9 * EXA)
    assert edge.effective_budget.max_cost_nanos == MAX_TOTAL


# Amounts that reach the edge in a few calls: the largest allowed, near it, small ones, and
# amounts beyond what one call may carry (refused by the amount rule itself).
_cost = st.one_of(
    st.just(EXA),
    st.integers(EXA - 1000, EXA),
    st.integers(0, 10**6),
    st.integers(EXA + 1, MAX_TOTAL),
)
_tokens = st.one_of(st.just(MAX_TOKENS), st.integers(0, 1000), st.integers(MAX_TOKENS, MAX_TOTAL))
_usage = st.tuples(_tokens, _cost)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pooled=st.booleans(),
    token_start=st.integers(0, 3 * MAX_TOKENS),
    reserve_first=st.booleans(),
    usages=st.lists(_usage, min_size=1, max_size=14),
)
async def test_totals_at_the_int64_edge_are_ok_or_validation_failed_never_internal(
    budget_channel: grpc.aio.Channel,
    db: asyncpg.Connection,
    pooled: bool,
    token_start: int,
    reserve_first: bool,
    usages: list[tuple[int, int]],
) -> None:
    budget = Budget(budget_channel)
    run_id, project = new_id("run"), new_id("proj")
    if pooled:  # the Python path (pools) instead of the one-statement functions
        await budget.put_scope(pb.SCOPE_PROJECT, project, kind=pb.SCOPE_BUDGET_KIND_POOLED)
    await budget.open_run(run_id, project_id=project)
    await budget.consume(run_id, tokens=1)  # creates the pool's balance row
    accepted = [1, 0]
    # Tokens start a few calls below the edge (10^15 per call would need thousands of calls):
    # an offset written past the ledger, so stored totals are the offset plus accepted usage.
    offset = MAX_TOTAL - token_start - 1
    for table, key in (("runs", "run_id"), ("pool_balances", "scope_id")):
        await db.execute(
            f"UPDATE budget.{table} SET consumed_tokens = consumed_tokens + $1 WHERE {key} = $2",
            offset,
            run_id if table == "runs" else project,
        )
    for tokens, cost in usages:
        reservation = ""
        if reserve_first and cost <= EXA:
            reserved = await budget.reserve(run_id, cost_nanos=max(cost, 1), ttl_seconds=600)
            reservation = reserved.reservation.reservation_id
        try:
            await budget.consume(run_id, reservation, tokens=tokens, cost_nanos=cost)
        except grpc.aio.AioRpcError as error:
            refused = decode(error)  # never INTERNAL
            assert (refused.code, refused.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "VALIDATION_FAILED",
            ), refused
            if reservation:  # the refused usage settled nothing: give the hold back
                await budget.release(run_id, reservation)
            continue
        accepted[0] += tokens
        accepted[1] += cost
    assert await totals(db, run_id) == (offset + accepted[0], accepted[1])
    assert offset + accepted[0] <= MAX_TOTAL
    assert accepted[1] <= MAX_TOTAL
    ledger = await db.fetchrow(
        "SELECT coalesce(sum(consumed_tokens), 0) AS t, coalesce(sum(consumed_cost_nanos), 0) AS c"
        " FROM budget.ledger WHERE run_id = $1",
        run_id,
    )
    assert (ledger["t"], ledger["c"]) == tuple(accepted)
    if pooled:
        pool = await db.fetchrow(
            "SELECT consumed_tokens, consumed_cost_nanos FROM budget.pool_balances"
            " WHERE scope_id = $1",
            project,
        )
        assert tuple(pool) == (offset + accepted[0], accepted[1])
