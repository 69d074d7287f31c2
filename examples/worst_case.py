"""The README's worst-case hold (max_tokens that cannot overrun) and an exact spend report."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from ration_client import Amounts, BudgetClient, Policy, Prices, ReserveMode, SpendGroupBy


async def main() -> None:
    run_id, project = f"run-{uuid.uuid4().hex[:8]}", f"travel-{uuid.uuid4().hex[:8]}"
    async with BudgetClient() as budget:
        policy = Policy(max_cost=Decimal("0.001"))  # one tenth of a cent left for this run
        await budget.open_run(run_id, project_id=project, policy=policy)
        prices = Prices(input_per_million=Decimal("0.15"), output_per_million=Decimal("0.60"))
        async with budget.call(
            run_id,
            model="gpt-4o-mini",
            prompt_tokens=1_200,
            max_output_tokens=2_000,
            prices=prices,
            mode=ReserveMode.UP_TO,
        ) as hold:
            print("max_tokens that fits:", hold.max_tokens)  # 1366 of the 2000 asked for
            # reply = await provider.complete(prompt, max_tokens=hold.max_tokens)
            billed = Amounts(tokens=1_200 + 900, cost_nanos=prices.cost_nanos(1_200, 900))
            result = await hold.consume(billed)
            print("overrun:", result.overrun)  # all zero: the bill fits the hold

        # Exact sums of the ledger's Consume rows of this project in a window, by model.
        now = datetime.now(UTC)
        window = (now - timedelta(days=1), now + timedelta(minutes=1))
        rows = await budget.report_spend_all(*window, SpendGroupBy.MODEL, project_id=project)
        for row in rows:
            print(row.key, row.cost, "USD", row.tokens, "tokens", row.consume_count, "calls")


asyncio.run(main())
