"""Pool exhaustion is waited on within the call's deadline, then STORE_BUSY, never a hang.

With RATION_DB_POOL_MAX=1, one call stalled on a lock (held by a test connection, under a long
statement timeout) keeps the only pooled connection busy. Another call then waits for it as
long as its deadline allows (the acquire timeout without a deadline) and answers UNAVAILABLE
STORE_BUSY (Postgres is up: not STORE_UNAVAILABLE) before its deadline, while the stalled call
is still waiting, i.e. long before the statement timeout would have freed the connection. A
call with a longer deadline keeps waiting meanwhile and succeeds once the lock goes and the
stalled call completes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, new_id
from tests.support.errors import decode
from tests.support.memory import Memory
from tests.support.postgres import lock_waiters
from tests.support.servers import StartServer

pytestmark = pytest.mark.timeout(120)

POOL = {
    "RATION_DB_POOL_MIN": "1",
    "RATION_DB_POOL_MAX": "1",
    "RATION_DB_ACQUIRE_TIMEOUT_MS": "500",
    "RATION_DB_STATEMENT_TIMEOUT_MS": "60000",
}
BOUND = 30.0
SHORT = 1.5  # the deadline of a call that cannot wait for the stalled one

# A statement waiting on a lock for longer than a budget batch's brief wait (200 ms,
# budget_service/usecases/reservations.py): the brief wait lets its connection go before the
# run's lane waits for good, so only a wait past it holds the pool's one connection.
WAITED_ON_A_LOCK_MS = 500


async def stall(db: asyncpg.Connection, start: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
    """Starts calls until one is waiting on the lock with the only pooled connection (an
    attempt can lose the connection to the health probe or the sweeper, and then fails fast)."""
    deadline = time.monotonic() + BOUND
    while True:
        task = asyncio.ensure_future(start())
        while not task.done():
            if await lock_waiters(db, waited_ms=WAITED_ON_A_LOCK_MS):
                return task
            assert time.monotonic() < deadline, "the call never reached the lock"
            await asyncio.sleep(0.02)
        error = task.exception()
        assert isinstance(error, grpc.aio.AioRpcError), error
        assert (error.code(), decode(error).reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_BUSY")
        assert time.monotonic() < deadline, "the call never got the pooled connection"


def reserve(run_id: str) -> pb.ReserveRequest:
    return pb.ReserveRequest(
        request_id=new_id(), run_id=run_id, model="gpt-4o", estimate=pb.Amounts(tokens=7)
    )


async def refused_while_stalled(
    call: Awaitable[Any], *waiting: asyncio.Task[Any], seconds: float = SHORT
) -> None:
    """`call` (with a deadline of `seconds`) answers STORE_BUSY before its deadline, while the
    stalled call and the patient ones (`waiting`) still wait."""
    started = time.monotonic()
    try:
        await call
    except grpc.aio.AioRpcError as error:
        details = decode(error)
        assert (details.code, details.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_BUSY"), (
            details
        )
        assert details.detail(error_details_pb2.RetryInfo) is not None
    else:
        raise AssertionError("a call got a connection from an exhausted pool")
    assert time.monotonic() - started < seconds, "STORE_BUSY came only after the deadline"
    assert not any(task.done() for task in waiting), "the refusal came only after the stall"


async def test_budget_calls_wait_their_deadline_then_store_busy_while_the_pool_is_stalled(
    start_server: StartServer, db: asyncpg.Connection, database_url: str
) -> None:
    runner = await start_server("budget", **POOL)
    locker = await asyncpg.connect(database_url)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.open_run("busy", max_tokens=1000)
        await budget.open_run("other", max_tokens=1000)
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("SELECT 1 FROM budget.runs WHERE run_id = 'busy' FOR UPDATE")
        try:
            stalled = await stall(
                db, lambda: budget.stub.Reserve(reserve("busy"), timeout=BOUND * 2)
            )
            stub = budget.stub
            patient = asyncio.ensure_future(stub.Reserve(reserve("other"), timeout=BOUND))
            # No deadline: the acquire timeout (500 ms) bounds the wait.
            await refused_while_stalled(budget.get_run("other"), stalled, patient)
            await refused_while_stalled(
                stub.Reserve(reserve("other"), timeout=SHORT), stalled, patient
            )
        finally:
            await transaction.rollback()
            await locker.close()
        granted = await stalled
        assert granted.reservation.granted.tokens == 7
        assert (await patient).reservation.granted.tokens == 7  # it waited, then succeeded
        assert (await budget.get_run("other")).run_id == "other"


async def test_memory_calls_answer_store_busy_while_the_only_connection_is_stalled(
    start_server: StartServer, db: asyncpg.Connection, database_url: str
) -> None:
    runner = await start_server("memory", RATION_MEMORY_EMBEDDER="false", **POOL)
    locker = await asyncpg.connect(database_url)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        busy, other = Memory(channel, "pool/busy"), Memory(channel, "pool/other")
        await busy.append("first")
        await other.append("first")
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute(
            "SELECT 1 FROM memory.memories WHERE memory_ref = 'pool/busy' FOR UPDATE"
        )
        try:
            stalled = await stall(db, lambda: busy.append("second", expected_revision=1))
            await refused_while_stalled(other.capacity(), stalled)
            await refused_while_stalled(other.append("second"), stalled)
        finally:
            await transaction.rollback()
            await locker.close()
        assert (await stalled).result.revision == 2
        assert await other.head() == 1
