"""A twin of a lifecycle call (same request id, same payload) that waited for the run's lock
while the first one committed replays the first one's reply. The engine's lifecycle functions
report the committed twin ('applied', budget.lock_run_v1) instead of applying it again: a second
resume would be refused (RUN_NOT_INTERRUPTED) and the refusal would reach the caller. (A second
close would answer "released 0", but the request log's key then rolls it back and replays.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import READ_TIMEOUT, Budget, new_id
from tests.support.postgres import lock_waiters

T = TypeVar("T")


async def twins_behind_the_run_lock(
    db: asyncpg.Connection, run_id: str, call: Callable[[], Awaitable[T]]
) -> tuple[T, T]:
    """Two copies of `call` issued while the run row is locked here, so both pass the request
    log check and wait for the run's lock; then the lock goes and they run one after the other."""
    async with db.transaction():
        await db.execute("SELECT 1 FROM budget.runs WHERE run_id = $1 FOR UPDATE", run_id)
        calls = [asyncio.ensure_future(call()) for _ in range(2)]
        deadline = time.monotonic() + READ_TIMEOUT  # a bound on a hang, not a speed assertion
        while await lock_waiters(db) < 2:
            assert time.monotonic() < deadline, "the twins never reached the run's lock"
            await asyncio.sleep(0.01)
    first, second = await asyncio.gather(*calls)
    return first, second


async def test_a_close_twin_that_waited_replays_the_first_close(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("run-1", max_tokens=100)
    await budget.reserve("run-1", tokens=5)
    request = pb.CloseRunRequest(
        request_id=new_id(), run_id="run-1", outcome=pb.RUN_OUTCOME_SUCCEEDED
    )
    first, second = await twins_behind_the_run_lock(
        db, "run-1", lambda: budget.stub.CloseRun(request)
    )
    assert first == second
    assert first.released_holds == 1
    decisions = await db.fetch(
        "SELECT decision, count(*) FROM budget.ledger WHERE run_id = 'run-1' GROUP BY 1"
    )
    assert dict(decisions) == {"open": 1, "grant": 1, "release": 1, "close": 1}


async def test_a_resume_twin_that_waited_replays_the_first_resume(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("run-2", max_tokens=100, on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT)
    await budget.consume("run-2", tokens=150)
    request = pb.ResumeRunRequest(
        request_id=new_id(), run_id="run-2", delta=pb.Amounts(tokens=100), approver="ops"
    )
    first, second = await twins_behind_the_run_lock(
        db, "run-2", lambda: budget.stub.ResumeRun(request)
    )
    assert first == second
    assert (first.run.state, first.run.effective_budget.max_tokens) == (pb.RUN_STATE_ACTIVE, 200)
    resumes = await db.fetchval(
        "SELECT count(*) FROM budget.ledger WHERE run_id = 'run-2' AND decision = 'resume'"
    )
    assert resumes == 1
