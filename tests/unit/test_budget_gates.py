"""Run gates: a bounded number of calls per run from a process, other runs pass, waits bounded."""

from __future__ import annotations

import asyncio

import pytest

from budget_service.usecases.run_gates import RunGates
from servicekit.errors import DomainError


async def test_calls_for_one_run_go_one_at_a_time_and_other_runs_pass() -> None:
    gates = RunGates(wait_seconds=5, per_run=1)
    inside: list[str] = []
    release, two_inside = asyncio.Event(), asyncio.Event()

    async def call(run_id: str) -> None:
        async with gates.reservation("t", run_id):
            inside.append(run_id)
            if len(inside) == 2:
                two_inside.set()
            await release.wait()
            inside.remove(run_id)

    calls = [asyncio.create_task(call(r)) for r in ("hot", "hot", "hot", "cold")]
    await two_inside.wait()
    for _ in range(10):  # let the waiting calls run as far as they can
        await asyncio.sleep(0)
    assert sorted(inside) == ["cold", "hot"]  # the other two wait for the first "hot"
    release.set()
    await asyncio.gather(*calls)
    assert not gates._gates  # noqa: SLF001 - nothing is kept for runs nobody calls


async def test_a_wait_past_the_bound_fails_as_retryable_and_leaves_the_gate_usable() -> None:
    gates = RunGates(wait_seconds=0.01, per_run=1)
    async with gates.reservation("t", "r"):
        with pytest.raises(DomainError) as refused:
            async with gates.reservation("t", "r"):
                pass
    assert refused.value.reason == "STORE_UNAVAILABLE"
    async with gates.reservation("t", "r"):
        pass
    assert not gates._gates  # noqa: SLF001
