"""What every acceptance test checks on the ledger: the provider's bill, and no hold left open."""

from __future__ import annotations

from decimal import Decimal

from ration_client import BudgetClient, Dimension
from ration_client.integrations import ModelUsage, PriceCatalog
from ration_client.views import nanos_to_usd
from tests.support.fake_llm import FakeLLM


async def assert_ledger_is_the_bill(
    budget: BudgetClient, run_id: str, fake: FakeLLM, model: str, catalog: PriceCatalog
) -> int:
    """Σ consumed tokens and cost equal what the fake provider billed (cost at the catalog's
    figure per call); nothing is held. Returns the consumed tokens."""
    run = await budget.get_run(run_id)
    tokens, cost = run.status(Dimension.TOKENS), run.status(Dimension.COST)
    assert tokens.held == 0
    assert cost.held == Decimal(0)
    assert tokens.consumed == fake.billed_tokens
    billed_nanos = sum(
        catalog.cost_nanos(model, ModelUsage(b.input_tokens, b.output_tokens)) for b in fake.billed
    )
    assert cost.consumed == nanos_to_usd(billed_nanos)
    return int(tokens.consumed)
