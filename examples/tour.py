"""The README's tour: a budget hold around a model call and budgeted memory in the prompt."""

import asyncio
import uuid
from decimal import Decimal

from ration_client import Amounts, BudgetClient, MemoryClient, Policy, usd


async def main() -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"  # a new run each time: the file reruns cleanly
    memory_ref = f"agents/travel/{run_id}"
    # Addresses default to RATION_BUDGET_ADDRESS / RATION_MEMORY_ADDRESS (127.0.0.1:50051 / 50052).
    async with BudgetClient() as budget, MemoryClient() as memory:
        policy = Policy(max_cost=Decimal("1.00"), max_tool_calls=10, threshold_percent=80)
        await budget.open_run(run_id, project_id="travel", policy=policy)

        # Memory writes are revisioned; secrets are replaced before anything is stored.
        await memory.append(memory_ref, ["The user prefers window seats."])
        key = "sk-live-1234567890abcdef"
        await memory.append(memory_ref, [f"Booking API key is {key}"], secrets={"booking_key": key})

        # The ranked prefix of memory that fits 800 o200k tokens: whole entries, never truncated.
        context = await memory.list(memory_ref, token_budget=800)
        prompt = "\n".join(item.content for item in context.entries)
        print(context.total_tokens, "tokens:", prompt.splitlines())

        # Hold an estimate, call the model, record what the provider billed. Leaving the block
        # without consume() releases the hold, also on exceptions and cancellation.
        estimate = Amounts(tokens=2_000, cost_nanos=usd("0.01"))
        async with budget.call(run_id, model="gpt-4o-mini", estimate=estimate) as hold:
            # reply = await provider.complete(prompt, max_tokens=hold.granted.tokens)
            await hold.consume(Amounts(tokens=1_234, cost_nanos=usd("0.0062")))

        async with budget.tool_call(run_id) as tool:  # one tool call, held then settled
            await tool.consume(Amounts(tool_calls=1))

        run = await budget.get_run(run_id)
        for status in run.dimensions:  # the run's own balance
            print(status.dimension, status.consumed, status.limit, status.remaining)
        for status in run.pools:  # pools it draws on (shared with their other runs), if any
            print(status.binding_scope, status.binding_scope_id, status.dimension, status.consumed)
        async for event in budget.watch(run_id):  # the content-free budget.* event stream
            print(event.seq, event.type, event.payload_json)
            if event.seq == 3:
                break


asyncio.run(main())
