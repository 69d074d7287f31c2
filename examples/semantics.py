"""The README's budget semantics in five minutes: overruns, UP_TO, INTERRUPT, pools, advisory."""

import asyncio
import uuid
from decimal import Decimal

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    Enforcement,
    OnExhaustion,
    Policy,
    ReserveMode,
    RunInterrupted,
    Scope,
    ScopeBudgetKind,
    Window,
    usd,
)


async def main() -> None:
    suffix = uuid.uuid4().hex[:8]  # new runs and scopes each time: the file reruns cleanly
    async with BudgetClient() as budget:
        # 1. A bill above its hold is recorded, as an overrun.
        run = f"sem-1-{suffix}"
        await budget.open_run(run, project_id="sem", policy=Policy(max_tokens=1_000))
        hold = await budget.reserve(run, model="gpt-4o", estimate=Amounts(tokens=100))
        spent = await budget.consume(
            run,
            model="gpt-4o",
            usage=Amounts(tokens=130),
            reservation_id=hold.reservation.reservation_id,
        )
        print("overrun:", spent.overrun.tokens)
        # 2. UP_TO: granted what is left instead of refused.
        hold = await budget.reserve(
            run, model="gpt-4o", estimate=Amounts(tokens=5_000), mode=ReserveMode.UP_TO
        )
        print("granted up to:", hold.reservation.granted.tokens)
        await budget.release(run, hold.reservation.reservation_id)

        # 3. INTERRUPT, then ResumeRun raises the limit.
        run = f"sem-3-{suffix}"
        policy = Policy(max_tool_calls=1, on_exhaustion=OnExhaustion.INTERRUPT)
        await budget.open_run(run, project_id="sem", policy=policy)
        await budget.consume(run, usage=Amounts(tool_calls=1))
        try:
            await budget.reserve(run, model="", estimate=Amounts(tool_calls=1))
        except RunInterrupted:
            print("interrupted")
        resumed = await budget.resume_run(run, delta=Amounts(tool_calls=5), approver="on call")
        print("resumed:", resumed.state.value)

        # 4. A spent DAY pool refuses until the next UTC midnight; the run lives.
        fleet, run = f"fleet-{suffix}", f"sem-4-{suffix}"
        await budget.put_scope_budget(
            Scope.PROJECT,
            fleet,
            ScopeBudgetKind.POOLED,
            policy=Policy(max_cost=Decimal("0.50")),
            window=Window.DAY,
        )
        await budget.open_run(run, project_id=fleet)
        await budget.consume(run, model="gpt-4o", usage=Amounts(cost_nanos=usd("0.50")))
        try:
            await budget.reserve(run, model="gpt-4o", estimate=Amounts(cost_nanos=usd("0.01")))
        except BudgetExhausted as spent_pool:
            print(
                "pool:",
                spent_pool.scope,
                spent_pool.scope_id == fleet,
                "retry within a day:",
                spent_pool.retry_after_seconds <= 86_400,
            )
        print("run:", (await budget.get_run(run)).state.value)

        # 5. An advisory scope refuses nothing; it reports what would have been refused.
        shadow, run = f"shadow-{suffix}", f"sem-5-{suffix}"
        await budget.put_scope_budget(
            Scope.PROJECT,
            shadow,
            ScopeBudgetKind.PER_RUN_CAP,
            policy=Policy(max_tokens=10),
            enforcement=Enforcement.ADVISORY,
        )
        await budget.open_run(run, project_id=shadow)
        shadowed = await budget.reserve(run, model="gpt-4o", estimate=Amounts(tokens=50))
        print("advisory:", shadowed.advisory_refusal_reason)
        await budget.release(run, shadowed.reservation.reservation_id)  # no hold left open


asyncio.run(main())
