"""Tool calls under a run's budget, for the framework integrations that see each tool start."""

from __future__ import annotations

from ration_client.integrations.core import BudgetGuard
from ration_client.views import Amounts, ConsumeResult


async def count_tool_call(guard: BudgetGuard) -> ConsumeResult:
    """Counts one tool call of the guard's run before the tool runs: reserved, then consumed at
    once, so a refused tool never runs and no tool hold stays open while it runs. Raises the
    service's refusal (`BudgetExhausted` naming toolCalls, `RunFailed`, …)."""
    async with guard.budget.tool_call(guard.run_id, ttl_seconds=guard.ttl_seconds) as hold:
        return await hold.consume(Amounts(tool_calls=1))
