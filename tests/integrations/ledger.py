"""What every acceptance test checks on the ledger: the provider's bill, and no hold left open."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from decimal import Decimal
from typing import Any

import pytest

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


async def assert_nothing_spent(budget: BudgetClient, run_id: str) -> None:
    """Nothing held and nothing consumed: the call's hold was released."""
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.held, tokens.consumed) == (0, 0)


async def cancel_mid_stream(
    budget: BudgetClient,
    run_id: str,
    fake: FakeLLM,
    read: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    settled: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Runs `read` (a stream reader that sets the event at its first chunk) until the fake
    provider holds the stream after that chunk, sees the hold open, cancels the reader, and
    checks that the hold was released (after `settled`, for callbacks that settle later)."""
    fake.stall = asyncio.Event()
    first = asyncio.Event()
    reader = asyncio.create_task(read(first))
    await fake.stalled.wait()
    await first.wait()
    assert (await budget.get_run(run_id)).status(Dimension.TOKENS).held > 0
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    fake.stall.set()
    if settled is not None:
        await settled()
    await assert_nothing_spent(budget, run_id)
