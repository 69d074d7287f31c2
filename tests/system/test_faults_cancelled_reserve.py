"""A client cancelling mid-Reserve leaves either no hold or one that expires.

Many Reserves (on a run drawing on a pooled project budget) are cut off at random points: by a
short client deadline or by cancelling the call, at delays spread around the measured latency
of a Reserve so that some never reach the server, some are cut mid-transaction and some finish.
Afterwards every hold is granted by exactly one ledger row of one of those requests and is
either ended or open with its expiry; once the TTL has passed the run and the pool hold
nothing (by the database clock, then as marked by the sweeper), the ledger and balances agree,
a retry with the same request_id replays a committed grant instead of granting twice, and the
service is healthy.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from tests.support.audits import audit_budget, wait_for_no_overdue_reservations
from tests.support.budget import Budget, new_id
from tests.support.errors import decode
from tests.support.servers import StartServer

pytestmark = pytest.mark.timeout(120)

TTL_SECONDS = 1
CALLS = 96
CONCURRENCY = 8
BOUND = 30.0


@pytest.fixture
async def budget(start_server: StartServer) -> AsyncIterator[Budget]:
    runner = await start_server("budget", RATION_SWEEP_INTERVAL_MS="100")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield Budget(channel)


def reserve(tokens: int, ttl_seconds: int = TTL_SECONDS) -> pb.ReserveRequest:
    return pb.ReserveRequest(
        request_id=new_id(),
        run_id="cut",
        model="gpt-4o",
        estimate=pb.Amounts(tokens=tokens, tool_calls=1),
        ttl_seconds=ttl_seconds,
    )


async def cut_off(
    budget: Budget, request: pb.ReserveRequest, delay: float, by_deadline: bool
) -> str:
    """Sends a Reserve and abandons it after `delay`; returns what the client saw."""
    if by_deadline:
        try:
            await budget.stub.Reserve(request, timeout=delay)
        except grpc.aio.AioRpcError as error:
            code, reason = error.code(), decode(error).reason
        else:
            return "granted"
        # Either the deadline passed, or the server saw it could not be met while the call
        # still waited its turn (STORE_BUSY: nothing was done).
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED or (code, reason) == (
            grpc.StatusCode.UNAVAILABLE,
            "STORE_BUSY",
        ), code
        return "deadline"
    call = budget.stub.Reserve(request, timeout=BOUND)
    await asyncio.sleep(delay)
    if call.cancel():
        return "cancelled"
    await call  # it had already finished: granted (no other answer is possible here)
    return "granted"


async def held_now(budget: Budget) -> tuple[int, ...]:
    """Tokens held on the run and its pool by the service's own (database clock) judgement."""
    check = await budget.check("cut")
    return tuple(d.held for d in check.dimensions if d.dimension == pb.DIMENSION_TOKENS)


async def test_cancelled_reserves_leave_no_hold_or_one_that_expires(
    budget: Budget, db: asyncpg.Connection
) -> None:
    await budget.put_scope(
        pb.SCOPE_PROJECT, "cut-proj", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=10**9
    )
    await budget.open_run("cut", project_id="cut-proj", max_tokens=10**8, max_tool_calls=10**6)

    # The latency of a Reserve at the concurrency used below: cut-off points spread around it.
    async def timed() -> float:
        started = time.perf_counter()
        reservation = await budget.stub.Reserve(reserve(10, ttl_seconds=60), timeout=BOUND)
        elapsed = time.perf_counter() - started
        await budget.release("cut", reservation.reservation.reservation_id)
        return elapsed

    for _ in range(3):  # the last batch, once the pool's connections are open and warm
        batch = await asyncio.gather(*(timed() for _ in range(CONCURRENCY)))
    typical = statistics.median(batch)

    rng = random.Random(113)
    requests = [reserve(rng.randint(1, 100)) for _ in range(CALLS)]
    outcomes: dict[str, str] = {}
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(request: pb.ReserveRequest) -> None:
        async with gate:
            delay = typical * 2 ** rng.uniform(-4, 2)  # from well before to well after
            by_deadline = rng.random() < 0.5
            outcomes[request.request_id] = await cut_off(budget, request, delay, by_deadline)

    await asyncio.gather(*(one(r) for r in requests))
    abandoned = [r for r in requests if outcomes[r.request_id] != "granted"]
    assert abandoned, "no call was cut off"

    # Right away: every hold came from exactly one grant of one of our requests, and is either
    # ended or open with an expiry no later than its TTL.
    ours = {r.request_id for r in requests}
    grants = await db.fetch(
        "SELECT request_id, reservation_id FROM budget.ledger"
        " WHERE run_id = 'cut' AND decision = 'grant'"
    )
    granted_by = {g["reservation_id"]: g["request_id"] for g in grants}
    assert len(granted_by) == len(grants)
    reservations = await db.fetch(
        "SELECT reservation_id, state, created_at, expires_at, ended_at FROM budget.holds"
        " WHERE run_id = 'cut'"
    )
    assert {h["reservation_id"] for h in reservations} == set(granted_by)
    for reservation in reservations:
        request_id = granted_by[reservation["reservation_id"]]
        assert request_id in ours or reservation["state"] == "released"  # the warm-up holds
        if reservation["state"] == "open":
            assert reservation["ended_at"] is None
            assert (
                0
                < (reservation["expires_at"] - reservation["created_at"]).total_seconds()
                <= TTL_SECONDS
            )
    committed = [r for r in abandoned if r.request_id in granted_by.values()]

    # Past the TTL nothing is held: at once by the database clock, then marked by the sweeper.
    deadline = time.monotonic() + BOUND
    while any(await held_now(budget)):
        assert time.monotonic() < deadline, "cancelled holds still count after their TTL"
        await asyncio.sleep(0.1)
    await wait_for_no_overdue_reservations(db, BOUND)
    assert await db.fetchval("SELECT held_tokens FROM budget.runs WHERE run_id = 'cut'") == 0
    assert await db.fetchval("SELECT sum(held_tokens) FROM budget.pool_balances") == 0
    await audit_budget(db)

    # The service is healthy, and a retry of an abandoned request replays a committed grant
    # (same reservation) or grants now: one grant per request_id either way.
    first_grant = {request_id: res for res, request_id in granted_by.items()}
    for request in abandoned:
        reply = await budget.stub.Reserve(request, timeout=BOUND)
        if request in committed:
            assert reply.reservation.reservation_id == first_grant[request.request_id]
        else:
            await budget.consume("cut", reply.reservation.reservation_id, tokens=1, tool_calls=1)
    per_request = await db.fetch(
        "SELECT request_id, count(*) AS n FROM budget.ledger"
        " WHERE run_id = 'cut' AND decision = 'grant' GROUP BY request_id HAVING count(*) > 1"
    )
    assert per_request == []
    await wait_for_no_overdue_reservations(db, BOUND)
    await audit_budget(db)
