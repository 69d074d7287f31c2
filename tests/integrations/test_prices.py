"""Prices: worst cases at the genai-prices catalog's own figures; unknown models are errors."""

from __future__ import annotations

import math
import subprocess
import sys
from decimal import Decimal

import pytest
from genai_prices import Usage, calc_price

from ration_client import BudgetClient, Prices
from ration_client.integrations import BudgetGuard, ModelUsage, PriceCatalog, UnknownModel


def catalog_nanos(model: str, provider: str, **usage: int) -> int:
    total = calc_price(Usage(**usage), model, provider_id=provider).total_price
    return math.ceil(Decimal(total) * 1_000_000_000)


@pytest.mark.parametrize(
    ("model", "provider", "prompt", "max_tokens"),
    [
        ("gpt-4o", "openai", 1234, 567),
        ("gpt-4o-mini", "openai", 10, 4096),
        ("claude-sonnet-4-5", "anthropic", 1000, 800),
        # Above 200k prompt tokens the catalog's higher tier applies: the hold follows it.
        ("claude-sonnet-4-5", "anthropic", 300_000, 2000),
    ],
)
async def test_worst_case_cost_equals_the_catalogs_figures(
    model: str, provider: str, prompt: int, max_tokens: int
) -> None:
    async with BudgetClient("127.0.0.1:1") as budget:
        guard = BudgetGuard(budget, "run", prices=PriceCatalog(provider_id=provider))
        call = guard.call(model, prompt_tokens=prompt, max_tokens=max_tokens)
        expected = catalog_nanos(model, provider, input_tokens=prompt, output_tokens=max_tokens)
        assert call.hold.estimate.cost_nanos == expected
        assert call.hold.estimate.tokens == prompt + max_tokens


def test_billed_cost_is_the_catalogs_figure_for_the_reported_usage() -> None:
    catalog = PriceCatalog(provider_id="openai")
    usage = ModelUsage(input_tokens=2000, output_tokens=300, cache_read_tokens=1024)
    expected = catalog_nanos(
        "gpt-4o", "openai", input_tokens=2000, output_tokens=300, cache_read_tokens=1024
    )
    assert catalog.cost_nanos("gpt-4o", usage) == expected


def test_unknown_model_without_override_is_an_error_naming_it() -> None:
    catalog = PriceCatalog()
    with pytest.raises(UnknownModel, match="acme-private-7b") as unknown:
        catalog.prices("acme-private-7b", 100)
    assert unknown.value.model == "acme-private-7b"
    with pytest.raises(UnknownModel, match="acme-private-7b"):
        catalog.cost_nanos("acme-private-7b", ModelUsage(1, 1))


async def test_an_override_prices_a_model_the_catalog_does_not_know() -> None:
    override = Prices(input_per_million=Decimal("1"), output_per_million=Decimal("2"))
    catalog = PriceCatalog({"acme-private-7b": override})
    assert catalog.prices("acme-private-7b", 100) == override
    assert catalog.cost_nanos("acme-private-7b", ModelUsage(1000, 1000)) == 3_000_000
    async with BudgetClient("127.0.0.1:1") as budget:
        guard = BudgetGuard(budget, "run", prices=catalog)
        call = guard.call("acme-private-7b", prompt_tokens=1000, max_tokens=500)
        assert call.hold.estimate.cost_nanos == 2_000_000


WITHOUT_EXTRAS = """
import importlib.abc, sys
class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("openai", "anthropic", "litellm", "genai_prices"):
            raise ImportError(f"{name} is not installed")
        return None
sys.meta_path.insert(0, NoExtras())
from decimal import Decimal
import ration_client
from ration_client.integrations import BudgetGuard, ModelUsage, PriceCatalog, UnknownModel
catalog = PriceCatalog({"m": ration_client.Prices(Decimal(1), Decimal(2))})
assert catalog.cost_nanos("m", ModelUsage(1000, 1000)) == 3_000_000
try:
    PriceCatalog().prices("gpt-4o")
except UnknownModel as error:
    print(error)
"""


def test_the_client_works_without_any_extra() -> None:
    """With the extras unimportable, the client and the guard work on overrides, and a catalog
    lookup is an UnknownModel saying what to install."""
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS], capture_output=True, text=True, check=True
    )
    assert "'gpt-4o'" in out.stdout
    assert "pip install 'ration[prices]'" in out.stdout


def test_the_client_imports_no_framework_and_no_catalog() -> None:
    code = (
        "import sys, ration_client, ration_client.integrations, ration_client.prices;"
        "print(sorted(m for m in ('openai', 'anthropic', 'litellm', 'genai_prices')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
