"""A run's view keeps its own balance apart from its pools', and prints zero cost as `0`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal

import pytest

from ration_client import (
    Amounts,
    BudgetClient,
    Dimension,
    Policy,
    Scope,
    ScopeBudgetKind,
    Window,
    usd,
)
from ration_client.views import nanos_to_usd
from tests.support.servers import StartServer


@pytest.fixture
async def budget(start_server: StartServer) -> AsyncIterator[BudgetClient]:
    runner = await start_server("budget")
    async with BudgetClient(f"127.0.0.1:{runner.port}") as client:
        yield client


async def test_a_run_that_spent_nothing_in_a_spent_pool_shows_the_pool_apart(
    budget: BudgetClient,
) -> None:
    pool = Policy(max_cost=Decimal("0.01"), max_tokens=1_000)
    await budget.put_scope_budget(
        Scope.PROJECT, "shared", ScopeBudgetKind.POOLED, policy=pool, window=Window.DAY
    )
    await budget.open_run("spender", project_id="shared")
    await budget.consume("spender", model="m", usage=Amounts(tokens=5, cost_nanos=usd("0.004")))
    await budget.open_run("idle", project_id="shared", policy=Policy(max_cost=Decimal("1")))

    run = await budget.get_run("idle")
    assert [s.dimension for s in run.dimensions] == [
        Dimension.TOKENS,
        Dimension.COST,
        Dimension.TOOL_CALLS,
        Dimension.RETRIES,
    ]
    own = run.status(Dimension.COST)
    assert (own.binding_scope, own.binding_scope_id) == (Scope.RUN, "")
    assert (own.consumed, own.limit) == (Decimal(0), Decimal(1))
    assert str(own.consumed) == "0", "zero cost prints as 0, never 0E-9"
    assert str(own.held) == "0"
    assert {(s.binding_scope, s.binding_scope_id) for s in run.pools} == {(Scope.PROJECT, "shared")}
    by_dimension = {s.dimension: s for s in run.pools}
    assert set(by_dimension) == {Dimension.TOKENS, Dimension.COST}
    assert by_dimension[Dimension.COST].consumed == Decimal("0.004")
    assert by_dimension[Dimension.COST].limit == Decimal("0.01")
    assert by_dimension[Dimension.TOKENS].consumed == 5


def test_nano_amounts_convert_exactly_and_zero_is_plain() -> None:
    assert str(nanos_to_usd(0)) == "0"
    assert nanos_to_usd(1_250_000_000) == Decimal("1.25")
    assert nanos_to_usd(1) == Decimal("0.000000001")
