"""Every budget RPC of one tenant against a running budget service (e.g. on Citus), with a
`checkpoint(name)` awaited after each: the Citus tests check there which shards the call
touched. Fresh run and scope ids each time, so it can run again on the same database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetPolicy,
    OnExhaustion,
    Policy,
    RunOutcome,
    RunState,
    Scope,
    ScopeBudgetKind,
    SpendGroupBy,
)

Checkpoint = Callable[[str], Awaitable[None]]


async def every_budget_rpc(address: str, checkpoint: Checkpoint, token: str | None = None) -> None:
    """OpenRun to CloseRun and ResumeRun, the streams, scope budgets and the spend report."""
    tag = uuid.uuid4().hex[:8]
    run, scope = f"every-{tag}", f"proj-{tag}"
    async with BudgetClient(address, token=token) as budget:
        await budget.put_scope_budget(
            Scope.PROJECT, scope, ScopeBudgetKind.POOLED, policy=BudgetPolicy(max_tokens=10_000)
        )
        await checkpoint("PutScopeBudget")
        await budget.get_scope_budget(Scope.PROJECT, scope, ScopeBudgetKind.POOLED)
        await checkpoint("GetScopeBudget")
        await budget.list_scope_budgets(scope=Scope.PROJECT)
        await checkpoint("ListScopeBudgets")
        policy = Policy(max_tokens=100, on_exhaustion=OnExhaustion.INTERRUPT)
        await budget.open_run(run, project_id=scope, policy=policy)
        await checkpoint("OpenRun")
        await budget.get_run(run)
        await checkpoint("GetRun")
        held = await budget.reserve(run, model="m", estimate=Amounts(tokens=10))
        await checkpoint("Reserve")
        await budget.consume(
            run,
            model="m",
            reservation_id=held.reservation.reservation_id,
            usage=Amounts(tokens=10),
        )
        await checkpoint("Consume")
        held = await budget.reserve(run, model="m", estimate=Amounts(tokens=10))
        await budget.release(run, held.reservation.reservation_id)
        await checkpoint("Reserve, Release")
        await budget.check(run, estimate=Amounts(tokens=5), model="m")
        await checkpoint("Check")
        assert await budget.list_events(run)
        await checkpoint("ListRunEvents")
        await _first_event(budget.watch(run))
        await checkpoint("WatchRunEvents")
        await _first_event(budget.watch_tenant(run_ids=[run]))
        await checkpoint("WatchTenantEvents")
        interrupted = await budget.consume(run, model="m", usage=Amounts(tokens=200))
        assert interrupted.state is RunState.INTERRUPTED
        await checkpoint("Consume (interrupts)")
        await budget.resume_run(run, delta=Amounts(tokens=1_000), approver="ops")
        await checkpoint("ResumeRun")
        await budget.close_run(run, RunOutcome.SUCCEEDED)
        await checkpoint("CloseRun")
        now = datetime.now(UTC)
        await budget.report_spend(now - timedelta(hours=1), now, SpendGroupBy.PROJECT)
        await checkpoint("ReportSpend")
        await budget.delete_scope_budget(Scope.PROJECT, scope, ScopeBudgetKind.POOLED)
        await checkpoint("DeleteScopeBudget")
        await budget.capabilities()
        await checkpoint("GetCapabilities")


async def _first_event(stream: AsyncIterator[object]) -> None:
    """The stream's first event (the run has some), then the stream is closed."""
    try:
        await asyncio.wait_for(anext(stream), timeout=30)
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
