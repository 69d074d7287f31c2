"""OpenAI Agents SDK under a ration budget, its history in ration memory (secrets redacted).

Needs a budget and a memory service (RATION_BUDGET_ADDRESS, RATION_MEMORY_ADDRESS, `make run`)
and an OpenAI-compatible endpoint (OPENAI_API_KEY, optionally OPENAI_BASE_URL)."""

import asyncio
import os
import uuid

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from ration_client import BudgetClient, Dimension, MemoryClient, Policy, ReserveMode
from ration_client.integrations.agents import (
    BudgetedModel,
    BudgetGuard,
    BudgetHooks,
    BudgetRefused,
    RationSession,
)

MODEL = os.environ.get("RATION_EXAMPLE_MODEL", "gpt-4o-mini")
API_KEY = "sk-example-0123456789abcdef"  # a secret the conversation mentions


@function_tool
def lookup(step: int) -> str:
    """Looks a step of the trip up."""
    return f"step {step}: on time"


async def main() -> None:
    set_tracing_disabled(True)
    run_id = f"agents-{uuid.uuid4().hex[:8]}"  # a new run each time: the file reruns cleanly
    async with BudgetClient() as budget, MemoryClient() as memory:
        policy = Policy(max_tokens=20_000, max_tool_calls=3)
        await budget.open_run(run_id, project_id="examples", policy=policy)
        guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=300)
        model = BudgetedModel(OpenAIChatCompletionsModel(MODEL, AsyncOpenAI()), guard)
        agent = Agent(name="travel", model=model, tools=[lookup])
        session = RationSession(run_id, memory, token_budget=4_000, secrets={"api": API_KEY})
        try:
            result = await Runner.run(
                agent,
                f"Check flight LH123 (key {API_KEY})",
                hooks=BudgetHooks(guard),
                session=session,
            )
            print("answer:", result.final_output)
        except BudgetRefused as refused:
            print("stopped by the budget:", refused.refusal.reason, refused.refusal.metadata)
        run = await budget.get_run(run_id)
        for dimension in (Dimension.TOKENS, Dimension.TOOL_CALLS, Dimension.COST):
            status = run.status(dimension)
            print(f"{dimension}: consumed {status.consumed}, held {status.held}")
        first = (await session.get_items())[0]
        print("stored first item:", first["content"])


if __name__ == "__main__":
    asyncio.run(main())
