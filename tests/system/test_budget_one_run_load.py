"""300 Reserve+Consume pairs on one run through two replicas: no refusal for load, exact spend.

Two budget replica processes share one database; 300 concurrent callers (half on each replica)
each Reserve one tool call on the same run and Consume it. The run admits 200 tool calls, so
100 callers must be refused, and only by the budget: BUDGET_HELD while others' holds are open
(a budget answer: the caller retries), then BUDGET_EXHAUSTED once the 200 are consumed.
Postgres is up the whole time, so no call may answer UNAVAILABLE (STORE_UNAVAILABLE or
STORE_BUSY): the ledger decides, there is no per-run gate. Every granted tool call is consumed
exactly, so consumed ends exactly at the limit, and the audit of the ledger against the
balances, events and holds passes.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from dataclasses import dataclass, field

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from tests.support.audits import audit_budget
from tests.support.budget import Budget
from tests.support.errors import decode
from tests.support.procs import BIN, Proc, clean_env

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

PAIRS = 300
LIMIT = 200  # tool calls the run admits: fewer than PAIRS, so the limit is reached exactly
POOL_LIMIT = 1_000  # the project pool every pair also draws on (not the binding limit)
CALL_SECONDS = 30.0  # each call's deadline: generous, the server may wait within it
LOAD_SECONDS = 120.0  # the whole load is bounded; never a speed assertion
MAX_HELD_RETRIES = 500


@dataclass
class Tally:
    """What the callers saw."""

    granted: dict[str, str] = field(default_factory=dict)  # Reserve request_id -> hold id
    consumed: set[str] = field(default_factory=set)  # acknowledged Consume request_ids
    held: int = 0  # BUDGET_HELD answers (retried)
    exhausted: int = 0  # callers refused for good (BUDGET_EXHAUSTED or a stopped run)
    unavailable: collections.Counter[str] = field(default_factory=collections.Counter)
    other: list[str] = field(default_factory=list)  # anything else: a failure


def retry_delay(error: grpc.aio.AioRpcError) -> float:
    info = decode(error).detail(error_details_pb2.RetryInfo)
    delay = 0.02 if info is None else info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return min(max(delay, 0.005), 0.1)


async def call(budget: Budget, tally: Tally, method: str, request: object) -> object:
    """One RPC; UNAVAILABLE is counted (the test fails on any) and retried with the same
    request, so the rest of the run can still be checked."""
    for _ in range(20):
        try:
            return await getattr(budget.stub, method)(request, timeout=CALL_SECONDS)
        except grpc.aio.AioRpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            tally.unavailable[f"{error.code().name} {decode(error).reason}"] += 1
            await asyncio.sleep(retry_delay(error))
    raise AssertionError(
        f"{method} kept being refused for load although Postgres was up: {dict(tally.unavailable)}"
    )


async def pair(budget: Budget, tally: Tally) -> None:
    """Reserve one tool call and consume it; retry BUDGET_HELD, stop at a final refusal."""
    for _ in range(MAX_HELD_RETRIES):
        reserve = pb.ReserveRequest(
            request_id=uuid.uuid4().hex,
            run_id="hot",
            model="gpt-4o",
            estimate=pb.Amounts(tool_calls=1),
        )
        try:
            reply = await call(budget, tally, "Reserve", reserve)
        except grpc.aio.AioRpcError as error:
            reason = decode(error).reason
            if reason == "BUDGET_HELD":
                tally.held += 1
                await asyncio.sleep(retry_delay(error))
                continue
            if reason in ("BUDGET_EXHAUSTED", "RUN_FAILED", "RUN_INTERRUPTED"):
                tally.exhausted += 1
                return
            tally.other.append(f"Reserve {error.code().name} {reason}")
            return
        assert isinstance(reply, pb.ReserveResponse)
        hold = reply.reservation
        assert hold.granted.tool_calls == 1, hold
        tally.granted[reserve.request_id] = hold.reservation_id
        consume = pb.ConsumeRequest(
            request_id=uuid.uuid4().hex,
            run_id="hot",
            reservation_id=hold.reservation_id,
            model="gpt-4o",
            usage=pb.Amounts(tool_calls=1),
        )
        try:
            await call(budget, tally, "Consume", consume)
        except grpc.aio.AioRpcError as error:
            tally.other.append(f"Consume {error.code().name} {decode(error).reason}")
            return
        tally.consumed.add(consume.request_id)
        return
    tally.other.append("BUDGET_HELD without end")


async def load(addresses: list[str]) -> Tally:
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    try:
        budgets = [Budget(c) for c in channels]
        await budgets[0].put_scope(
            pb.SCOPE_PROJECT, "proj", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tool_calls=POOL_LIMIT
        )
        await budgets[0].open_run("hot", project_id="proj", max_tool_calls=LIMIT)
        tally = Tally()
        callers = [pair(budgets[i % len(budgets)], tally) for i in range(PAIRS)]
        await asyncio.wait_for(asyncio.gather(*callers), LOAD_SECONDS)
        return tally
    finally:
        for channel in channels:
            await channel.close()


async def check(database_url: str, tally: Tally) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        run = await conn.fetchrow("SELECT * FROM budget.runs WHERE run_id = 'hot'")
        assert (run["consumed_tool_calls"], run["held_tool_calls"]) == (LIMIT, 0)
        pool = await conn.fetchrow(
            "SELECT consumed_tool_calls, held_tool_calls FROM budget.pool_balances"
            " WHERE scope_id = 'proj'"
        )
        assert (pool["consumed_tool_calls"], pool["held_tool_calls"]) == (LIMIT, 0)
        grants = await conn.fetch(
            "SELECT request_id, reservation_id FROM budget.ledger WHERE decision = 'grant'"
        )
        assert {g["request_id"]: g["reservation_id"] for g in grants} == tally.granted
        assert len(grants) == LIMIT
        consumes = await conn.fetch(
            "SELECT request_id FROM budget.ledger WHERE decision = 'consume'"
        )
        assert sorted(c["request_id"] for c in consumes) == sorted(tally.consumed)
        states = await conn.fetch("SELECT state, count(*) AS n FROM budget.holds GROUP BY state")
        assert {s["state"]: s["n"] for s in states} == {"consumed": LIMIT}
        return await audit_budget(conn)
    finally:
        await conn.close()


def test_one_run_through_two_replicas_is_refused_only_by_its_budget(database_url: str) -> None:
    env = clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_LOG_LEVEL="WARNING",
        # A small pool and a short acquire timeout: every call has a deadline, and it (not
        # the acquire timeout, which bounds only calls without one) bounds any wait.
        RATION_DB_POOL_MAX="4",
        RATION_DB_ACQUIRE_TIMEOUT_MS="100",
    )
    procs = [Proc.start([str(BIN / "ration"), "budget", "serve"], env) for _ in range(2)]
    try:
        for proc in procs:
            proc.wait_for("ready:")
        tally = asyncio.run(load([p.addresses["budget"] for p in procs]))
        assert not tally.unavailable, (
            f"refused for load although Postgres was up: {dict(tally.unavailable)}"
        )
        assert tally.other == []
        assert len(tally.granted) == len(tally.consumed) == LIMIT
        assert tally.exhausted == PAIRS - LIMIT
        counts = asyncio.run(check(database_url, tally))
        assert counts["holds"] == LIMIT
        assert counts["grants_checked"] == 2 * LIMIT  # each on the run and on the pool
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.stop()
    assert [p.popen.returncode for p in procs] == [0, 0], procs[0].stderr_tail()
