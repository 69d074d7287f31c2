"""Postgres restarted under load: the budget service fails closed and loses nothing.

`ration budget serve` runs against an embedded Postgres of the test's own (never the machine's
shared server) while clients Reserve and Consume. The test stops Postgres (`pg_ctl stop -m
fast`) and starts it again: health reports NOT_SERVING then SERVING; every call made while
Postgres was down fails UNAVAILABLE STORE_UNAVAILABLE (none succeeds falsely); every Consume
acknowledged before, during or after the outage, or retried with its request_id afterwards, is
in the ledger exactly once; holds left behind by ambiguous calls expire, and the ledger, balances,
events and holds agree.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from tests.support.audits import audit_budget, wait_for_no_overdue_reservations
from tests.support.budget import Budget
from tests.support.errors import decode
from tests.support.health import NOT_SERVING, SERVING, HealthWatch
from tests.support.postgres import RestartablePostgres
from tests.support.procs import BIN, Proc, clean_env

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

CLIENTS = 8
RUNS = 4
HOLD_TTL_SECONDS = 2
PROGRESS = 25  # acknowledged Consumes before the outage, and again after it
BOUND = 60.0  # every wait below is for a condition, bounded by this


@dataclass
class Call:
    method: str
    started: float
    ended: float
    code: grpc.StatusCode
    reason: str = ""


@dataclass
class Load:
    calls: list[Call] = field(default_factory=list)
    acknowledged: dict[str, tuple[str, int]] = field(default_factory=dict)  # rid → run, tokens
    unanswered: list[pb.ConsumeRequest] = field(default_factory=list)  # to retry afterwards
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(self, budget: Budget, method: str, request: object) -> object | None:
        started = time.monotonic()
        try:
            reply = await getattr(budget.stub, method)(request, timeout=15)
        except grpc.aio.AioRpcError as error:
            details = decode(error)
            self.calls.append(Call(method, started, time.monotonic(), error.code(), details.reason))
            return None
        self.calls.append(Call(method, started, time.monotonic(), grpc.StatusCode.OK))
        return reply

    def acknowledged_since(self, moment: float) -> int:
        ok = grpc.StatusCode.OK
        return sum(
            c.method == "Consume" and c.code == ok and c.started > moment for c in self.calls
        )


async def client(index: int, budget: Budget, load: Load, rng: random.Random) -> None:
    run_id = f"run-{index % RUNS}"
    while not load.stop.is_set():
        reserve = pb.ReserveRequest(
            request_id=uuid.uuid4().hex,
            run_id=run_id,
            model="gpt-4o",
            estimate=pb.Amounts(tokens=rng.randint(10, 50)),
            ttl_seconds=HOLD_TTL_SECONDS,
        )
        reservation = await load.call(budget, "Reserve", reserve)
        if not isinstance(reservation, pb.ReserveResponse):
            await asyncio.sleep(0.1)  # Postgres is down: do not spin
            continue
        usage = rng.randint(0, reservation.reservation.granted.tokens)
        consume = pb.ConsumeRequest(
            request_id=uuid.uuid4().hex,
            run_id=run_id,
            reservation_id=reservation.reservation.reservation_id,
            model="gpt-4o",
            usage=pb.Amounts(tokens=usage),
        )
        if await load.call(budget, "Consume", consume) is None:
            load.unanswered.append(consume)
            await asyncio.sleep(0.1)
        else:
            load.acknowledged[consume.request_id] = (run_id, usage)


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def scenario(
    postgres: RestartablePostgres, address: str
) -> tuple[Load, list[int], float, float]:
    channel = grpc.aio.insecure_channel(address)
    budget = Budget(channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT, "proj", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=10**12
    )
    for i in range(RUNS):
        await budget.open_run(f"run-{i}", project_id="proj", max_tokens=10**11)
    health = HealthWatch(address)
    health.start()
    await health.wait_for(SERVING, BOUND)
    load = Load()
    rng = random.Random(8)
    clients = [asyncio.create_task(client(i, budget, load, rng)) for i in range(CLIENTS)]
    try:
        await wait_until(lambda: len(load.acknowledged) >= PROGRESS, "progress before the outage")
        await asyncio.to_thread(postgres.stop_fast)
        down = time.monotonic()
        await health.wait_for(NOT_SERVING, BOUND)
        # Calls made entirely while Postgres is down: the load keeps making them.
        await wait_until(
            lambda: sum(1 for c in load.calls if c.started > down) >= 3 * CLIENTS,
            "calls during the outage",
        )
        up = time.monotonic()
        await asyncio.to_thread(postgres.start_again)
        await health.wait_for(SERVING, BOUND)
        await wait_until(lambda: load.acknowledged_since(up) >= PROGRESS, "progress after it")
    finally:
        load.stop.set()
        await asyncio.gather(*clients)
        await health.stop()
    # The client's rule: an UNAVAILABLE Consume is retried with the same request_id.
    for consume in load.unanswered:
        for _ in range(50):
            reply = await load.call(budget, "Consume", consume)
            if reply is not None:
                load.acknowledged[consume.request_id] = (consume.run_id, consume.usage.tokens)
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"Consume {consume.request_id} never succeeded after the restart")
    await channel.close()
    return load, health.seen, down, up


async def check_store(url: str, load: Load) -> None:
    conn = await asyncpg.connect(url)
    try:
        await wait_for_no_overdue_reservations(conn, BOUND)
        rows = await conn.fetch(
            "SELECT request_id, run_id, consumed_tokens FROM budget.ledger"
            " WHERE decision = 'consume'"
        )
        recorded = {r["request_id"]: (r["run_id"], r["consumed_tokens"]) for r in rows}
        assert len(rows) == len(recorded), "a Consume was recorded twice"
        assert recorded == load.acknowledged, "acknowledged usage lost, or unacknowledged kept"
        for run in await conn.fetch("SELECT run_id, consumed_tokens FROM budget.runs"):
            expected = sum(t for r, t in load.acknowledged.values() if r == run["run_id"])
            assert run["consumed_tokens"] == expected, run["run_id"]
        await audit_budget(conn)
    finally:
        await conn.close()


def test_postgres_restart_under_load_fails_closed_and_loses_nothing() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="ration-restart-"))
    postgres = RestartablePostgres(data_dir / "pg")
    proc: Proc | None = None
    try:
        url = postgres.start()
        env = clean_env(
            RATION_DATABASE_URL=url,
            RATION_HEALTH_PROBE_MS="100",
            RATION_SWEEP_INTERVAL_MS="100",
            RATION_DB_ACQUIRE_TIMEOUT_MS="1000",
            RATION_DB_STATEMENT_TIMEOUT_MS="3000",
            RATION_LOG_LEVEL="ERROR",
        )
        proc = Proc.start([str(BIN / "ration"), "budget", "serve"], env)
        proc.wait_for("ready:")
        load, seen, down, up = asyncio.run(scenario(postgres, proc.addresses["budget"]))

        assert seen[:1] == [SERVING]
        assert NOT_SERVING in seen
        assert seen[-1] == SERVING
        assert seen.index(NOT_SERVING) < len(seen) - 1
        during = [c for c in load.calls if down < c.started and c.ended < up]
        assert during, "no call was made while Postgres was down"
        closed = (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
        wrong = [c for c in during if (c.code, c.reason) != closed]
        assert not wrong, f"calls during the outage did not fail closed: {wrong[:5]}"
        unexpected = {
            (c.method, c.code, c.reason)
            for c in load.calls
            if c.code not in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)
        }
        assert not unexpected, unexpected
        asyncio.run(check_store(url, load))
        assert proc.stop(signal.SIGTERM) == 0, proc.stderr_tail()
    finally:
        if proc is not None and proc.popen.poll() is None:
            proc.stop(signal.SIGKILL)
        postgres.close()
        shutil.rmtree(data_dir, ignore_errors=True)
