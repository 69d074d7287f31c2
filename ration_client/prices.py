"""What a model call costs: the genai-prices catalog (offline), per-model overrides, no zeroes.

`PriceCatalog` answers two questions for the integrations: the linear `Prices` a call's worst case
is reserved at (the catalog's tier for that prompt size), and what a finished call cost from its
reported usage. A model neither in the overrides nor in the catalog is `UnknownModel`, naming it:
never a silent zero. genai-prices ships its data in the wheel and is read offline (no update
thread is started); it is the `ration[prices]` extra, imported on first use."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ration_client.holds import Prices

if TYPE_CHECKING:
    from genai_prices.types import PriceCalculation

__all__ = ["ModelUsage", "PriceCatalog", "Prices", "UnknownModel"]

_MILLION = 1_000_000
_NANOS_PER_USD = 1_000_000_000


class UnknownModel(LookupError):
    """The model has no override and the catalog does not know it: its cost cannot be bounded."""

    def __init__(self, model: str, provider_id: str | None = None, why: str = "") -> None:
        where = f" (provider {provider_id})" if provider_id else ""
        why = why or "not in the genai-prices catalog"
        super().__init__(
            f"no price for model {model!r}{where}: {why} and no override given; pass "
            "PriceCatalog(overrides={model: Prices(...)})"
        )
        self.model = model
        self.provider_id = provider_id


@dataclass(frozen=True)
class ModelUsage:
    """What a provider reported for one call. `input_tokens` counts every prompt token, cached
    ones included (`cache_read_tokens`/`cache_write_tokens` say how many were cached)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class PriceCatalog:
    """Prices per model: `overrides` first (exact model names), then genai-prices.

    `provider_id` (e.g. "openai", "anthropic") narrows the catalog lookup; without it genai-prices
    picks the provider whose models match the name."""

    def __init__(
        self, overrides: Mapping[str, Prices] | None = None, *, provider_id: str | None = None
    ) -> None:
        self.overrides = dict(overrides or {})
        self.provider_id = provider_id

    def prices(self, model: str, prompt_tokens: int = 0) -> Prices:
        """The linear prices a call of this prompt size is bounded by: the override, or the
        catalog's input and output price per million tokens at this prompt's tier."""
        override = self.overrides.get(model)
        if override is not None:
            return override
        probe = prompt_tokens or _MILLION  # no prompt: the top tier, the worst case
        input_price = self._calc(model, input_tokens=probe).input_price
        output_price = self._calc(model, input_tokens=probe, output_tokens=_MILLION).output_price
        return Prices(
            input_per_million=Decimal(input_price) * _MILLION / probe,
            output_per_million=Decimal(output_price),
        )

    def cost_nanos(self, model: str, usage: ModelUsage) -> int:
        """What the call cost, in nanos of USD rounded up: the catalog's figure for the reported
        usage (cache discounts included), or the override's linear prices."""
        override = self.overrides.get(model)
        if override is not None:
            return override.cost_nanos(usage.input_tokens, usage.output_tokens)
        calculation = self._calc(
            model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        return math.ceil(Decimal(calculation.total_price) * _NANOS_PER_USD)

    def _calc(self, model: str, **usage: int) -> PriceCalculation:
        try:
            from genai_prices import Usage, calc_price
        except ImportError as error:  # the extra is not installed
            why = "genai-prices is not installed (pip install 'ration[prices]')"
            raise UnknownModel(model, self.provider_id, why) from error
        counts: dict[str, Any] = {key: value for key, value in usage.items() if value}
        try:
            return calc_price(Usage(**counts), model, provider_id=self.provider_id)
        except LookupError as error:
            raise UnknownModel(model, self.provider_id) from error
