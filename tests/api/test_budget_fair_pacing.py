"""Many callers buy a tenant no larger share of a process (DESIGN 5, issue 24).

Tenant a keeps 32 Reserve calls in flight, tenant b 4, on one budget server: both have calls
waiting behind their own batch, so a is paced to b's rate (the floor set to 1 call a second so
that it never binds here) and the seconds it was held are counted. Shares, not speeds: the
calls each tenant got once the rates are known, whatever this machine's speed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from servicekit.server import ServiceRunner
from tests.support.budget import Budget
from tests.support.servers import StartServer, scrape
from tests.support.token_files import write_token_file

WARM_UP, COUNTED = 1.0, 2.0  # seconds: the pacer's rates take half of one to settle
A_CALLERS, B_CALLERS = 32, 4


@pytest.fixture
async def runner(start_server: StartServer, tmp_path: Path) -> ServiceRunner:
    tokens = write_token_file(
        tmp_path / "tokens.json", ("a-writer", "a", ["writer"]), ("b-writer", "b", ["writer"])
    )
    return await start_server(
        "budget", RATION_TOKEN_FILE=str(tokens), RATION_BUDGET_PACING_FLOOR="1"
    )


@pytest.fixture
async def channel(runner: ServiceRunner) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel


def as_(channel: grpc.aio.Channel, token: str) -> Budget:
    return Budget(channel, (("authorization", f"Bearer {token}"),))


async def reserving(budget: Budget, runs: list[str], callers: int, counted: list[int]) -> None:
    """`callers` callers reserving one token at a time on `runs` until the window closes;
    the calls answered inside the counted window are counted."""
    began = time.monotonic()
    start, end = began + WARM_UP, began + WARM_UP + COUNTED
    turns = itertools.cycle(runs)

    async def caller() -> None:
        while time.monotonic() < end:
            await budget.reserve(next(turns), tokens=1)
            if start <= time.monotonic() < end:
                counted[0] += 1

    await asyncio.gather(*(caller() for _ in range(callers)))


async def test_a_tenant_with_many_callers_is_paced_to_its_neighbours_rate(
    runner: ServiceRunner, channel: grpc.aio.Channel
) -> None:
    a, b = as_(channel, "a-writer"), as_(channel, "b-writer")
    a_runs = [f"a-{i}" for i in range(16)]
    b_runs = [f"b-{i}" for i in range(4)]
    for run_id in a_runs:
        await a.open_run(run_id, max_tokens=10**9)
    for run_id in b_runs:
        await b.open_run(run_id, max_tokens=10**9)
    a_calls, b_calls = [0], [0]
    await asyncio.gather(
        reserving(a, a_runs, A_CALLERS, a_calls), reserving(b, b_runs, B_CALLERS, b_calls)
    )
    assert b_calls[0] > 0
    # Unpaced, a's batches carry up to 8 calls to b's one; paced, each gets about as many.
    assert a_calls[0] < 3 * b_calls[0], (a_calls, b_calls)
    metrics = await asyncio.to_thread(scrape, runner.metrics_port)
    held = next(
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("ration_budget_paced_seconds_total ")
    )
    assert held > 0
