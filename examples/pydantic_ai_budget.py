"""A pydantic-ai agent under a ration budget: every model request held, every tool call counted.

Needs a budget service (RATION_BUDGET_ADDRESS, `make run`) and an OpenAI-compatible endpoint
(OPENAI_API_KEY, optionally OPENAI_BASE_URL)."""

import asyncio
import os
import uuid

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel

from ration_client import BudgetClient, Dimension, Policy, ReserveMode
from ration_client.integrations.pydantic_ai import BudgetedModel, BudgetGuard, BudgetRefused

MODEL = os.environ.get("RATION_EXAMPLE_MODEL", "gpt-4o-mini")


async def main() -> None:
    run_id = f"pydantic-ai-{uuid.uuid4().hex[:8]}"  # a new run each time: reruns cleanly
    async with BudgetClient() as budget:
        await budget.open_run(run_id, project_id="examples", policy=Policy(max_tool_calls=3))
        guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=300)
        agent = Agent(BudgetedModel(OpenAIChatModel(MODEL), guard))

        @agent.tool_plain
        def lookup(step: int) -> str:
            """Looks a step up."""
            return f"step {step} looked up"

        try:
            print("answer:", (await agent.run("Look every step up.")).output)
        except BudgetRefused as refused:
            print("stopped by the budget:", refused.refusal.reason, refused.refusal.metadata)
        run = await budget.get_run(run_id)
        for dimension in (Dimension.TOKENS, Dimension.TOOL_CALLS, Dimension.COST):
            status = run.status(dimension)
            print(f"{dimension}: consumed {status.consumed}, held {status.held}")


if __name__ == "__main__":
    asyncio.run(main())
