"""A run locked elsewhere delays only its own calls (DESIGN 5, issue 24): while a transaction
outside the service holds one run's row, that run's Reserve waits for it, and the tenant's
other runs go on being reserved and consumed; once the lock goes, the waiting call is decided
as if it had never waited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from servicekit.server import ServiceRunner
from tests.support.budget import READ_TIMEOUT, Budget, new_id
from tests.support.errors import rpc_error
from tests.support.postgres import lock_waiters
from tests.support.servers import StartServer, scrape

# Each call's deadline: on a service whose tenant batch waited for the locked run, the other
# run's calls would wait on the lock until it ran out.
CALL_DEADLINE = 10.0


@pytest.fixture
async def runner(start_server: StartServer) -> ServiceRunner:
    # A statement timeout past the calls' deadlines: the wait ends by deadline or lock release.
    return await start_server("budget", RATION_DB_STATEMENT_TIMEOUT_MS="30000")


@pytest.fixture
async def channel(runner: ServiceRunner) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel


async def reserve(budget: Budget, run_id: str, tokens: int) -> pb.ReserveResponse:
    request = pb.ReserveRequest(
        request_id=new_id(), run_id=run_id, model="gpt-4o", estimate=pb.Amounts(tokens=tokens)
    )
    reply: pb.ReserveResponse = await budget.stub.Reserve(request, timeout=CALL_DEADLINE)
    return reply


async def test_a_run_locked_elsewhere_delays_only_its_own_calls(
    runner: ServiceRunner, channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(channel)
    await budget.open_run("locked", max_tokens=1000)
    await budget.open_run("free", max_tokens=1000)
    tenant = await db.fetchval("SELECT tenant_id FROM budget.runs WHERE run_id = 'locked'")
    outside = db.transaction()  # an operator's SELECT ... FOR UPDATE, kept open
    await outside.start()
    try:
        await db.execute(
            "SELECT 1 FROM budget.runs WHERE tenant_id = $1 AND run_id = 'locked' FOR UPDATE",
            tenant,
        )
        waiting = asyncio.ensure_future(reserve(budget, "locked", 100))
        bound = time.monotonic() + READ_TIMEOUT  # a bound on a hang, not a speed assertion
        while await lock_waiters(db) < 1:
            assert time.monotonic() < bound, "the locked run's Reserve never reached its lock"
            assert not waiting.done(), waiting.result()
            await asyncio.sleep(0.01)
        for _ in range(5):
            granted = await reserve(budget, "free", 10)
            consumed = await budget.stub.Consume(
                pb.ConsumeRequest(
                    request_id=new_id(),
                    run_id="free",
                    reservation_id=granted.reservation.reservation_id,
                    model="gpt-4o",
                    usage=pb.Amounts(tokens=7),
                ),
                timeout=CALL_DEADLINE,
            )
            assert consumed.reservation_state == pb.RESERVATION_STATE_CONSUMED
        # A Check takes no locks: the locked run is judged as it stands.
        checked = await budget.stub.Check(
            pb.CheckRequest(run_id="locked", estimate=pb.Amounts(tokens=100)),
            timeout=CALL_DEADLINE,
        )
        assert checked.would_grant
        assert not waiting.done(), "the locked run's Reserve did not wait for its lock"
    finally:
        await outside.rollback()
    # The outside transaction rolled back: the waiting Reserve is decided now.
    held = await asyncio.wait_for(waiting, READ_TIMEOUT)
    assert held.reservation.granted.tokens == 100
    free = await db.fetchrow(
        "SELECT consumed_tokens, held_tokens FROM budget.runs WHERE run_id = 'free'"
    )
    assert tuple(free) == (35, 0)
    locked = await db.fetchrow(
        "SELECT consumed_tokens, held_tokens FROM budget.runs WHERE run_id = 'locked'"
    )
    assert tuple(locked) == (0, 100)
    decisions = await db.fetch(
        "SELECT decision, count(*) FROM budget.ledger WHERE run_id = 'locked' GROUP BY 1"
    )
    assert dict(decisions) == {"open": 1, "grant": 1}  # decided once, after the wait
    metrics = await asyncio.to_thread(scrape, runner.metrics_port)
    assert "ration_budget_locked_run_waits_total 1.0" in metrics.splitlines()


async def test_a_call_on_a_run_locked_past_its_deadline_is_store_busy_and_writes_nothing(
    channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(channel)
    await budget.open_run("locked", max_tokens=1000)
    outside = db.transaction()
    await outside.start()
    try:
        await db.execute("SELECT 1 FROM budget.runs WHERE run_id = 'locked' FOR UPDATE")
        request = pb.ReserveRequest(
            request_id=new_id(), run_id="locked", model="gpt-4o", estimate=pb.Amounts(tokens=1)
        )
        # The lane's wait for the lock ends with the call's deadline, not the statement
        # timeout (30 s here): the call is told STORE_BUSY, and the connection is free again.
        busy = await rpc_error(budget.stub.Reserve(request, timeout=3))
        assert (busy.code, busy.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_BUSY")
        bound = time.monotonic() + READ_TIMEOUT
        while await lock_waiters(db) > 0:
            assert time.monotonic() < bound, "the lane kept waiting for the lock"
            await asyncio.sleep(0.05)
    finally:
        await outside.rollback()
    holds = await db.fetchval("SELECT count(*) FROM budget.holds WHERE run_id = 'locked'")
    assert holds == 0
    # The same request, sent again once the lock is gone, is decided (nothing was stored).
    granted = await budget.stub.Reserve(request, timeout=CALL_DEADLINE)
    assert granted.reservation.granted.tokens == 1


_DECIDE = "SELECT * FROM budget.decide_v3($1, false, $2, NULL, $3::budget.decide_item_v2[])"


async def test_a_skipping_batch_leaves_a_locked_runs_items_untouched_for_its_lane(
    channel: grpc.aio.Channel, db: asyncpg.Connection, database_url: str
) -> None:
    """On the engine: in one batch with a free run, a locked run's Reserve and Consume (naming
    its hold) are answered 'busy' with nothing written for them; sent again waiting, they are
    decided."""
    budget = Budget(channel)
    await budget.open_run("locked", max_tokens=1000)
    await budget.open_run("free", max_tokens=1000)
    hold = (await budget.reserve("locked", tokens=50)).reservation.reservation_id
    tenant = await db.fetchval("SELECT tenant_id FROM budget.runs WHERE run_id = 'locked'")
    before = await db.fetchrow("SELECT * FROM budget.runs WHERE run_id = 'locked'")
    items = [
        ("reserve", new_id(), b"fp", "free", "res-free", "m", 10, 0, 0, 0, False, 60),
        ("consume", new_id(), b"fp", "locked", hold, "m", 40, 0, 0, 0, False, 0),
        ("reserve", new_id(), b"fp", "locked", "res-locked", "m", 20, 0, 0, 0, False, 60),
    ]
    engine = await asyncpg.connect(database_url)
    try:
        async with db.transaction():
            await db.execute("SELECT 1 FROM budget.runs WHERE run_id = 'locked' FOR UPDATE")
            skipped = await engine.fetchrow(_DECIDE, tenant, "skip", items)
        assert skipped["outcomes"] == ["done", "busy", "busy"]
        for answers in ("responses", "refusals", "tallies"):
            assert skipped[answers][1:] == [None, None], answers
        assert await db.fetchrow("SELECT * FROM budget.runs WHERE run_id = 'locked'") == before
        stored = await db.fetchval(
            "SELECT count(*) FROM budget.request_log WHERE request_id = ANY($1::text[])",
            [i[1] for i in items],
        )
        assert stored == 1  # the free run's Reserve only
        waited = await engine.fetchrow(_DECIDE, tenant, "wait", items[1:])
        assert waited["outcomes"] == ["done", "done"]
    finally:
        await engine.close()
    locked = await db.fetchrow(
        "SELECT consumed_tokens, held_tokens FROM budget.runs WHERE run_id = 'locked'"
    )
    assert tuple(locked) == (40, 20)


async def test_a_tenants_locked_runs_hold_at_most_a_quarter_of_the_pool(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    """Four locked runs of one tenant, a pool of 8: their lanes wait on at most 2 connections
    (a quarter of the pool, with no RATION_DB_TENANT_SHARE set), the others wait for one of
    the tenant's own, and the tenant's free run still flows; all are decided once the locks go."""
    runner = await start_server(
        "budget", RATION_DB_POOL_MAX="8", RATION_DB_STATEMENT_TIMEOUT_MS="30000"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        locked = [f"locked-{n}" for n in range(4)]
        for run_id in [*locked, "free"]:
            await budget.open_run(run_id, max_tokens=1000)
        outside = db.transaction()
        await outside.start()
        try:
            await db.execute(
                "SELECT 1 FROM budget.runs WHERE run_id = ANY($1::text[]) FOR UPDATE", locked
            )
            waiting = [asyncio.ensure_future(reserve(budget, r, 100)) for r in locked]
            bound = time.monotonic() + READ_TIMEOUT
            while await lock_waiters(db) < 2:
                assert time.monotonic() < bound, "the lanes never reached their locks"
                await asyncio.sleep(0.01)
            granted = await reserve(budget, "free", 10)  # the free run flows meanwhile
            assert granted.reservation.granted.tokens == 10
            assert await lock_waiters(db) == 2  # the other lanes wait for the share
            assert not any(w.done() for w in waiting)
        finally:
            await outside.rollback()
        held = await asyncio.wait_for(asyncio.gather(*waiting), READ_TIMEOUT)
        assert [h.reservation.granted.tokens for h in held] == [100] * 4
