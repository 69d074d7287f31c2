"""Budget scenarios: every event type in hard and advisory mode, re-run by the payload walker."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import USD, Budget


async def attempt(call: Awaitable[Any]) -> None:
    """A call that may be refused (hard mode) or granted (advisory): scenarios run in both."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        await call


Scenario = Callable[[Budget], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


@scenario
async def rfc_cost_trace(budget: Budget) -> None:
    """RFC 0084: max cost 1.00 USD at 80%: consumes of 0.50, 0.30 and 0.22."""
    await budget.open_run("cost-run", max_cost_nanos=USD, threshold_percent=80)
    for cost in (500_000_000, 300_000_000, 220_000_000):
        await budget.consume("cost-run", cost_nanos=cost)


@scenario
async def rfc_tool_call_trace(budget: Budget) -> None:
    """RFC 0084: max tool calls 2 at 50%; the third tool-call Reserve breaches."""
    await budget.open_run("tool-run", max_tool_calls=2, threshold_percent=50)
    for _ in range(2):
        reservation = await budget.reserve("tool-run", tool_calls=1)
        await budget.consume("tool-run", reservation.reservation.reservation_id, tool_calls=1)
    await attempt(budget.reserve("tool-run", tool_calls=1))


@scenario
async def interrupt_and_resume(budget: Budget) -> None:
    """INTERRUPT on a token breach, then ResumeRun raises the limit and the run goes on."""
    await budget.open_run("int-run", max_tokens=100, max_retries=1, on_exhaustion=2)
    await budget.consume("int-run", tokens=120, retries=1)
    # Only an INTERRUPTED run can be resumed: advisory mode never interrupts one.
    if (await budget.get_run("int-run")).state == pb.RUN_STATE_INTERRUPTED:
        await budget.resume("int-run", tokens=200)
    reservation = await budget.reserve("int-run", tokens=50)
    await budget.consume("int-run", reservation.reservation.reservation_id, tokens=50)


@scenario
async def pooled_scopes_and_host_ceiling(budget: Budget) -> None:
    """Scope caps bind the effective budget; the pool is shared and breached by a run."""
    await budget.put_scope(pb.SCOPE_PROJECT, "pooled", max_tokens=500, max_retries=3)
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        "pooled",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        max_cost_nanos=2 * USD,
    )
    for run_id in ("pool-a", "pool-b"):
        await budget.open_run(run_id, project_id="pooled", max_tokens=1000, threshold_percent=0)
        await budget.consume(run_id, tokens=10, cost_nanos=USD)
    await attempt(budget.reserve("pool-a", cost_nanos=1))


async def run_everything(budget: Budget) -> None:
    for function in SCENARIOS.values():
        await function(budget)
