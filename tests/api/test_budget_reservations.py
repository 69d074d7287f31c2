"""The per-call protocol: contention, UP_TO, settling, overruns, release, expiry, idempotency.

Tests on runs of their own share the module's server and database; those that count rows
across the database (or run their own sweeper) keep a database of their own."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, new_id, row_counts
from tests.support.errors import rpc_error
from tests.support.servers import StartServer


def dimension(dimensions: list[pb.DimensionStatus], which: int) -> pb.DimensionStatus:
    return next(d for d in dimensions if d.dimension == which and d.binding_scope == pb.SCOPE_RUN)


async def test_contention_is_retryable_and_leaves_the_run_active(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    budget, run_id = Budget(shared_budget_channel), new_id("r")
    await budget.open_run(run_id, max_tokens=100)
    first = await budget.reserve(run_id, tokens=60)
    retry_id = new_id()
    held = await rpc_error(budget.reserve(run_id, request_id=retry_id, tokens=50))
    assert (held.code, held.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_HELD")
    assert held.metadata == {
        "dimension": "tokens",
        "limit": "100",
        "consumed": "0",
        "held": "60",
        "requested": "50",
        "scope": "run",
        "scopeId": "",
    }
    retry = held.detail(error_details_pb2.RetryInfo)
    assert retry is not None
    assert retry.retry_delay.ToTimedelta().total_seconds() > 0
    run = await budget.get_run(run_id)
    assert run.state == pb.RUN_STATE_ACTIVE
    assert [t for t, _ in await budget.trace(run_id)] == ["budget.reserved"]  # not a breach
    # Once the hold is released, the same request (same request_id) is granted.
    await budget.release(run_id, first.reservation.reservation_id)
    granted = await budget.reserve(run_id, request_id=retry_id, tokens=50)
    assert granted.reservation.granted.tokens == 50


async def test_up_to_grants_what_is_left_of_tokens(shared_budget_channel: grpc.aio.Channel) -> None:
    budget, run_id = Budget(shared_budget_channel), new_id("r")
    await budget.open_run(run_id, max_tokens=1000)
    await budget.reserve(run_id, tokens=700)
    partial = await budget.reserve(run_id, tokens=500, mode=pb.RESERVE_MODE_UP_TO)
    assert partial.reservation.requested.tokens == 500
    assert partial.reservation.granted.tokens == 300
    assert dimension(list(partial.dimensions), pb.DIMENSION_TOKENS).remaining == 0


async def test_consume_settles_the_hold_and_reports_the_overrun(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    budget, run_id = Budget(shared_budget_channel), new_id("r")
    await budget.open_run(run_id, max_tokens=1000)
    reservation = await budget.reserve(run_id, tokens=100, cost_nanos=5000)
    consumed = await budget.consume(
        run_id, reservation.reservation.reservation_id, tokens=130, cost_nanos=2000
    )
    assert consumed.overrun == pb.Amounts(tokens=30)
    assert consumed.reservation_state == pb.RESERVATION_STATE_CONSUMED
    tokens = dimension(list(consumed.dimensions), pb.DIMENSION_TOKENS)
    assert (tokens.consumed, tokens.held, tokens.remaining) == (130, 0, 870)
    again = await rpc_error(
        budget.consume(run_id, reservation.reservation.reservation_id, tokens=1)
    )
    assert (again.reason, again.metadata) == ("RESERVATION_SETTLED", {"state": "consumed"})
    released = await rpc_error(budget.release(run_id, reservation.reservation.reservation_id))
    assert (released.reason, released.metadata) == ("RESERVATION_SETTLED", {"state": "consumed"})


async def test_release_voids_a_hold_once(shared_budget_channel: grpc.aio.Channel) -> None:
    budget, run_id = Budget(shared_budget_channel), new_id("r")
    await budget.open_run(run_id, max_tool_calls=1)
    reservation = await budget.reserve(run_id, tool_calls=1)
    reply = await budget.release(run_id, reservation.reservation.reservation_id)
    assert reply.reservation.state == pb.RESERVATION_STATE_RELEASED
    twice = await rpc_error(budget.release(run_id, reservation.reservation.reservation_id))
    assert (twice.code, twice.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RESERVATION_SETTLED",
    )
    assert twice.metadata == {"state": "released"}
    missing = await rpc_error(budget.release(run_id, "res_missing"))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "RESERVATION_NOT_FOUND")
    # Usage of a released hold is still recorded, without the hold.
    late = await budget.consume(run_id, reservation.reservation.reservation_id, tool_calls=1)
    assert late.reservation_state == pb.RESERVATION_STATE_RELEASED
    assert dimension(list(late.dimensions), pb.DIMENSION_TOOL_CALLS).consumed == 1


async def expire_now(db: asyncpg.Connection, reservation_id: str) -> None:
    """Moves a hold's expiry into the past (the database clock decides, no sleeping)."""
    await db.execute(
        "UPDATE budget.holds SET expires_at = now() - interval '1 second'"
        " WHERE reservation_id = $1",
        reservation_id,
    )


async def test_an_expired_hold_stops_counting_at_once(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=100)
    reservation = await budget.reserve("r", tokens=80, ttl_seconds=60)
    assert (
        reservation.reservation.expires_at.ToDatetime()
        > reservation.reservation.created_at.ToDatetime()
    )
    await expire_now(db, reservation.reservation.reservation_id)
    before = await row_counts(db)
    check = await budget.check("r", tokens=100)
    assert check.would_grant
    assert dimension(list(check.dimensions), pb.DIMENSION_TOKENS).held == 0
    assert await row_counts(db) == before  # Check wrote nothing, not even the expiry
    state = "SELECT state FROM budget.holds WHERE reservation_id = $1"
    assert await db.fetchval(state, reservation.reservation.reservation_id) == "open"
    granted = await budget.reserve("r", tokens=100)  # expires the old hold first
    assert granted.reservation.granted.tokens == 100
    assert await db.fetchval(state, reservation.reservation.reservation_id) == "expired"
    late = await budget.consume("r", reservation.reservation.reservation_id, tokens=5)
    assert late.reservation_state == pb.RESERVATION_STATE_EXPIRED
    assert late.overrun == pb.Amounts()
    settled = await rpc_error(budget.release("r", reservation.reservation.reservation_id))
    assert settled.metadata == {"state": "expired"}
    decisions = await db.fetch(
        "SELECT decision, consumed_tokens, held_tokens FROM budget.ledger"
        " WHERE reservation_id = $1 ORDER BY entry_id",
        reservation.reservation.reservation_id,
    )
    # The hold ended once (expired); the late usage names it but settles nothing.
    assert [tuple(r) for r in decisions] == [
        ("grant", 0, 80),
        ("expire", 0, -80),
        ("consume", 5, 0),
    ]


async def test_the_sweeper_expires_overdue_holds_on_its_own(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    runner = await start_server("budget", RATION_SWEEP_INTERVAL_MS="20")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.open_run("r", max_tokens=100)
        reservation = await budget.reserve("r", tokens=80)
        await expire_now(db, reservation.reservation.reservation_id)
        query = "SELECT held_tokens FROM budget.runs WHERE run_id = 'r'"
        for _ in range(500):  # waits for a condition, bounded; not a timing assertion
            if await db.fetchval(query) == 0:
                break
            await asyncio.sleep(0.02)
        assert await db.fetchval(query) == 0
        row = await db.fetchrow(
            "SELECT decision, request_id FROM budget.ledger WHERE reservation_id = $1"
            " ORDER BY entry_id DESC LIMIT 1",
            reservation.reservation.reservation_id,
        )
        assert (row["decision"], row["request_id"]) == ("expire", None)


async def test_a_retry_replays_the_response_and_never_counts_twice(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=1000)
    reserve_id, consume_id = new_id(), new_id()
    first = await budget.reserve("r", request_id=reserve_id, tokens=100)
    again = await budget.reserve("r", request_id=reserve_id, tokens=100)
    assert again == first
    used = await budget.consume(
        "r", first.reservation.reservation_id, request_id=consume_id, tokens=90
    )
    replay = await budget.consume(
        "r", first.reservation.reservation_id, request_id=consume_id, tokens=90
    )
    assert replay == used
    tokens = dimension(list((await budget.get_run("r")).dimensions), pb.DIMENSION_TOKENS)
    assert (tokens.consumed, tokens.held) == (90, 0)
    assert await db.fetchval("SELECT count(*) FROM budget.holds") == 1
    reused = await rpc_error(
        budget.consume("r", first.reservation.reservation_id, request_id=consume_id, tokens=91)
    )
    assert (reused.code, reused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")
    assert reused.metadata == {"requestId": consume_id}


async def test_concurrent_duplicates_count_once(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=10_000)
    request_id = new_id()
    replies = await asyncio.gather(
        *(budget.consume("r", request_id=request_id, tokens=7) for _ in range(8))
    )
    assert all(reply == replies[0] for reply in replies)
    assert await db.fetchval("SELECT consumed_tokens FROM budget.runs") == 7
    # Twins of a Consume that settles a hold: the ones that waited for the run lock replay the
    # first one's response instead of finding the hold consumed (RESERVATION_SETTLED).
    reservation = await budget.reserve("r", tokens=50)
    settle_id = new_id()
    settled = await asyncio.gather(
        *(
            budget.consume(
                "r", reservation.reservation.reservation_id, request_id=settle_id, tokens=40
            )
            for _ in range(8)
        )
    )
    assert all(reply == settled[0] for reply in settled)
    assert settled[0].reservation_state == pb.RESERVATION_STATE_CONSUMED
    assert await db.fetchval("SELECT consumed_tokens FROM budget.runs") == 47
    assert await db.fetchval("SELECT count(*) FROM budget.ledger WHERE decision = 'consume'") == 2


async def test_concurrent_checks_share_reads_yet_each_is_judged_on_its_own_run(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    """Concurrent Checks of one tenant go out as shared statements (servicekit/coalesce.py):
    every answer must still be its own run's, and an unknown run among them is RUN_NOT_FOUND."""
    budget = Budget(shared_budget_channel)
    small, medium, large, nobody = (new_id(n) for n in ("small", "medium", "large", "nobody"))
    limits = {small: 10, medium: 100, large: 1000}
    for run_id, limit in limits.items():
        await budget.open_run(run_id, max_tokens=limit)
    await budget.reserve(medium, tokens=60)  # held: 40 left of 100
    asks = [(run_id, tokens) for run_id in limits for tokens in (5, 50, 500)] * 4
    answers = await asyncio.gather(*(budget.check(r, tokens=t) for r, t in asks))
    left = {small: 10, medium: 40, large: 1000}
    assert [a.would_grant for a in answers] == [t <= left[r] for r, t in asks]
    for (run_id, _), answer in zip(asks, answers, strict=True):
        tokens = dimension(list(answer.dimensions), pb.DIMENSION_TOKENS)
        assert tokens.limit == limits[run_id]
    missing, _ = await asyncio.gather(
        asyncio.gather(*(rpc_error(budget.check(nobody, tokens=1)) for _ in range(3))),
        budget.check(small, tokens=1),
    )
    assert [(m.code, m.reason) for m in missing[:3]] == [
        (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")
    ] * 3
