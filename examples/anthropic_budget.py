"""An agent loop on the Anthropic SDK (streaming), stopped by a ration budget of 2,000 tokens.

RATION_BUDGET_ADDRESS (and RATION_TOKEN) name the budget service; ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY the provider, as the SDK reads them. Run: python examples/anthropic_budget.py"""

from __future__ import annotations

import asyncio
import uuid

from anthropic import AsyncAnthropic

from ration_client import BudgetClient, BudgetPolicy, Dimension
from ration_client.integrations import BudgetGuard
from ration_client.integrations.anthropic import BudgetExhaustedError, budgeted


async def main() -> None:
    run_id = f"example-{uuid.uuid4()}"
    async with BudgetClient() as budget:
        await budget.open_run(run_id, project_id="examples", policy=BudgetPolicy(max_tokens=2000))
        client = budgeted(AsyncAnthropic(), BudgetGuard(budget, run_id))
        messages = [{"role": "user", "content": "Plan a three-day trip, one step at a time."}]
        try:
            while True:
                async with client.messages.stream(
                    model="claude-sonnet-4-5", max_tokens=200, messages=messages
                ) as stream:
                    text = "".join([piece async for piece in stream.text_stream])
                messages.append({"role": "assistant", "content": text})
                messages.append({"role": "user", "content": "Next step."})
        except BudgetExhaustedError as stopped:
            print(f"stopped by budget: {stopped.refusal.reason}")
        tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
        print(f"consumed {tokens.consumed} of {tokens.limit} tokens, {tokens.held} held")


if __name__ == "__main__":
    asyncio.run(main())
