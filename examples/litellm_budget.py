"""An agent loop on LiteLLM with RationLogger, stopped by a ration budget of 2,000 tokens.

RATION_BUDGET_ADDRESS (and RATION_TOKEN) name the budget service; OPENAI_BASE_URL and
OPENAI_API_KEY the provider. Run: python examples/litellm_budget.py"""

from __future__ import annotations

import asyncio
import os
import uuid

import litellm

from ration_client import BudgetClient, BudgetPolicy, Dimension
from ration_client.integrations.litellm import BudgetExhaustedError, RationLogger


async def main() -> None:
    run_id = f"example-{uuid.uuid4()}"
    async with BudgetClient() as budget:
        await budget.open_run(run_id, project_id="examples", policy=BudgetPolicy(max_tokens=2000))
        logger = RationLogger(budget)
        litellm.callbacks = [logger]
        messages = [{"role": "user", "content": "Plan a three-day trip, one step at a time."}]
        try:
            while True:
                reply = await litellm.acompletion(
                    model="openai/gpt-4o-mini",
                    api_base=os.environ.get("OPENAI_BASE_URL"),
                    messages=messages,
                    max_tokens=200,
                    metadata={"ration_run_id": run_id},
                )
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
                messages.append({"role": "user", "content": "Next step."})
        except BudgetExhaustedError as stopped:
            print(f"stopped by budget: {stopped.refusal.reason}")
        await logger.settled()
        tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
        print(f"consumed {tokens.consumed} of {tokens.limit} tokens, {tokens.held} held")


if __name__ == "__main__":
    asyncio.run(main())
