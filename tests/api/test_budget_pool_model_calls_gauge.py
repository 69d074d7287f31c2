"""The pool gauges show a pool's model calls per window, read through budget.pool_gauges()."""

from __future__ import annotations

import asyncio
import time

from ration_client import Amounts, BudgetClient, Policy, Scope, ScopeBudgetKind, Window
from tests.support.servers import StartServer, scrape

REMAINING = 'ration_budget_pool_remaining_model_calls{rank="1",scope="project"} 7.0'
LIMIT = 'ration_budget_pool_limit_model_calls{rank="1",scope="project"} 10.0'


async def test_the_model_calls_gauge_counts_consumed_and_held_calls(
    start_server: StartServer,
) -> None:
    runner = await start_server("budget", RATION_SWEEP_INTERVAL_MS="50")
    async with BudgetClient(f"127.0.0.1:{runner.port}") as budget:
        await budget.put_scope_budget(
            Scope.PROJECT,
            "fleet",
            ScopeBudgetKind.POOLED,
            policy=Policy(max_tokens=1_000_000),
            window=Window.DAY,
            max_model_calls=10,
        )
        await budget.open_run("r", project_id="fleet")
        await budget.consume("r", model="gpt-4o", usage=Amounts(tokens=10))
        await budget.consume("r", model="gpt-4o", usage=Amounts(tokens=10))
        await budget.reserve("r", model="gpt-4o", estimate=Amounts(tokens=10))  # held: 1
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:  # until a sweep after the calls refreshed the gauges
        text = await asyncio.to_thread(scrape, runner.metrics_port)
        if REMAINING in text:
            break
        await asyncio.sleep(0.05)
    assert REMAINING in text, [line for line in text.splitlines() if "model_calls" in line]
    assert LIMIT in text
    assert "fleet" not in text
