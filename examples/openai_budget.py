"""An agent loop on the OpenAI SDK, stopped by a ration budget of 2,000 tokens.

RATION_BUDGET_ADDRESS (and RATION_TOKEN) name the budget service; OPENAI_BASE_URL and
OPENAI_API_KEY the provider, as the SDK reads them. Run: python examples/openai_budget.py"""

from __future__ import annotations

import asyncio
import uuid

from openai import AsyncOpenAI

from ration_client import BudgetClient, BudgetPolicy, Dimension
from ration_client.integrations import BudgetGuard
from ration_client.integrations.openai import BudgetExhaustedError, budgeted


async def main() -> None:
    run_id = f"example-{uuid.uuid4()}"
    async with BudgetClient() as budget:
        await budget.open_run(run_id, project_id="examples", policy=BudgetPolicy(max_tokens=2000))
        client = budgeted(AsyncOpenAI(), BudgetGuard(budget, run_id))
        messages = [{"role": "user", "content": "Plan a three-day trip, one step at a time."}]
        try:
            while True:
                reply = await client.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, max_tokens=200
                )
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
                messages.append({"role": "user", "content": "Next step."})
        except BudgetExhaustedError as stopped:
            print(f"stopped by budget: {stopped.refusal.reason}")
        tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
        print(f"consumed {tokens.consumed} of {tokens.limit} tokens, {tokens.held} held")


if __name__ == "__main__":
    asyncio.run(main())
