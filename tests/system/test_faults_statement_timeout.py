"""A stalled database: statements that wait past RATION_DB_STATEMENT_TIMEOUT_MS become
UNAVAILABLE STORE_UNAVAILABLE (retryable) instead of hanging, and nothing is half-written.

The stall is a lock held by a test connection in an open transaction: the whole run table
(every budget call waits), one run row (only the calls that must lock it wait), or one memory's
head row. When the lock goes, the same requests (same request_id) succeed, exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from ration.memory.v1 import memory_service_pb2 as mpb
from tests.support.budget import Budget, new_id
from tests.support.errors import decode, rpc_error
from tests.support.fingerprints import changed_tables, fingerprint
from tests.support.memory import Memory, entry
from tests.support.servers import StartServer

# Small enough to keep the test short; the client deadline is far beyond it, so a hang would
# show as DEADLINE_EXCEEDED rather than pass.
STATEMENT_TIMEOUT_MS = "600"
CLIENT_DEADLINE = 30.0


async def unavailable(call: object) -> None:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        details = decode(error)
        assert (details.code, details.reason) == (
            grpc.StatusCode.UNAVAILABLE,
            "STORE_UNAVAILABLE",
        ), details
        return
    raise AssertionError("the call succeeded through a lock it should have waited for")


@pytest.fixture
async def budget(start_server: StartServer) -> AsyncIterator[Budget]:
    runner = await start_server("budget", RATION_DB_STATEMENT_TIMEOUT_MS=STATEMENT_TIMEOUT_MS)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield Budget(channel)


@pytest.fixture
async def locker(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A second connection that takes locks in a transaction the test ends."""
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def rows_of(db: asyncpg.Connection, run_id: str) -> list[int]:
    """A hash of everything stored about one run, table by table."""
    return [
        await db.fetchval(
            f"SELECT coalesce(sum(hashtext(x::text)::bigint), 0) FROM budget.{table} x"
            " WHERE run_id = $1",
            run_id,
        )
        for table in ("runs", "holds", "ledger", "events")
    ]


def reserve(run_id: str, request_id: str) -> pb.ReserveRequest:
    return pb.ReserveRequest(
        request_id=request_id, run_id=run_id, model="gpt-4o", estimate=pb.Amounts(tokens=10)
    )


def consume(run_id: str, request_id: str) -> pb.ConsumeRequest:
    return pb.ConsumeRequest(
        request_id=request_id, run_id=run_id, model="gpt-4o", usage=pb.Amounts(tokens=3)
    )


async def test_a_locked_run_table_makes_every_budget_call_unavailable_and_writes_nothing(
    budget: Budget, db: asyncpg.Connection, locker: asyncpg.Connection
) -> None:
    await budget.open_run("r", max_tokens=1000)
    before = await fingerprint(db, "budget")
    held, used, opened = reserve("r", new_id()), consume("r", new_id()), new_id()
    transaction = locker.transaction()
    await transaction.start()
    await locker.execute("LOCK TABLE budget.runs IN ACCESS EXCLUSIVE MODE")
    try:
        stub = budget.stub
        await unavailable(stub.Reserve(held, timeout=CLIENT_DEADLINE))
        await unavailable(stub.Consume(used, timeout=CLIENT_DEADLINE))
        await unavailable(stub.GetRun(pb.GetRunRequest(run_id="r"), timeout=CLIENT_DEADLINE))
        await unavailable(stub.Check(pb.CheckRequest(run_id="r"), timeout=CLIENT_DEADLINE))
        await unavailable(
            stub.OpenRun(
                pb.OpenRunRequest(request_id=opened, run_id="r2", project_id="proj"),
                timeout=CLIENT_DEADLINE,
            )
        )
    finally:
        await transaction.rollback()
    assert changed_tables(before, await fingerprint(db, "budget")) == []
    # The same requests now go through, once each.
    granted = await budget.stub.Reserve(held, timeout=CLIENT_DEADLINE)
    assert granted.reservation.granted.tokens == 10
    await budget.stub.Consume(used, timeout=CLIENT_DEADLINE)
    assert await budget.stub.Reserve(held, timeout=CLIENT_DEADLINE) == granted  # a replay
    run = await budget.get_run("r")
    tokens = next(d for d in run.dimensions if d.dimension == pb.DIMENSION_TOKENS)
    assert (tokens.consumed, tokens.held) == (3, 10)


async def test_a_locked_run_row_stalls_only_the_calls_that_lock_it(
    budget: Budget, db: asyncpg.Connection, locker: asyncpg.Connection
) -> None:
    await budget.open_run("stuck", max_tokens=1000)
    await budget.open_run("free", max_tokens=1000)
    reservation = await budget.reserve("stuck", tokens=5)
    before = await rows_of(db, "stuck")
    transaction = locker.transaction()
    await transaction.start()
    await locker.execute("SELECT 1 FROM budget.runs WHERE run_id = 'stuck' FOR UPDATE")
    try:
        stub = budget.stub
        await unavailable(stub.Reserve(reserve("stuck", new_id()), timeout=CLIENT_DEADLINE))
        await unavailable(stub.Consume(consume("stuck", new_id()), timeout=CLIENT_DEADLINE))
        await unavailable(budget.release("stuck", reservation.reservation.reservation_id))
        await unavailable(budget.close("stuck"))
        # Reads take no lock, and other runs are not stalled.
        assert (await budget.check("stuck", tokens=1)).would_grant
        assert (await budget.get_run("stuck")).run_id == "stuck"
        await budget.reserve("free", tokens=5)
    finally:
        await transaction.rollback()
    assert await rows_of(db, "stuck") == before
    await budget.release("stuck", reservation.reservation.reservation_id)
    assert await rows_of(db, "stuck") != before


async def test_a_locked_memory_head_makes_writes_unavailable_and_writes_nothing(
    start_server: StartServer, db: asyncpg.Connection, locker: asyncpg.Connection
) -> None:
    runner = await start_server(
        "memory",
        RATION_DB_STATEMENT_TIMEOUT_MS=STATEMENT_TIMEOUT_MS,
        RATION_MEMORY_EMBEDDER="false",
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "stall/one")
        first = await memory.append("the first entry")
        before = await fingerprint(db, "memory")
        request = mpb.AppendEntriesRequest(
            request_id=new_id(),
            memory_ref=memory.ref,
            entries=[entry("written after the stall")],
            expected_revision=1,
        )
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute(
            "SELECT 1 FROM memory.memories WHERE memory_ref = 'stall/one' FOR UPDATE"
        )
        try:
            await unavailable(memory.stub.AppendEntries(request, timeout=CLIENT_DEADLINE))
            await unavailable(memory.forget(first.entries[0].entry_id))
            assert (await memory.capacity()).revision == 1  # reads are not stalled
        finally:
            await transaction.rollback()
        assert changed_tables(before, await fingerprint(db, "memory")) == []
        written = await memory.stub.AppendEntries(request, timeout=CLIENT_DEADLINE)
        assert written.result.revision == 2
        assert await memory.stub.AppendEntries(request, timeout=CLIENT_DEADLINE) == written
        error = await rpc_error(memory.append("stale", expected_revision=1))
        assert error.reason == "REVISION_CONFLICT"
        assert await memory.head() == 2
