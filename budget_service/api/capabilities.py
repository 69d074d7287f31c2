"""The OpenWOP `budget` and `limits` capability blocks, derived from configuration only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal

from budget_service.usecases.settings import NANOS_PER_USD, BudgetSettings

DIMENSIONS = ("tokens", "cost", "toolCalls", "retries", "model")
SCOPES = ("run", "workflow", "agent", "project")


@dataclass(frozen=True)
class BudgetCapabilities:
    enforce: str
    max_budget_tokens: int | None
    max_budget_cost_nanos: int | None
    dimensions: tuple[str, ...] = DIMENSIONS
    scopes: tuple[str, ...] = SCOPES

    @classmethod
    def from_settings(cls, settings: BudgetSettings) -> BudgetCapabilities:
        return cls(settings.enforce, settings.max_budget_tokens, settings.max_budget_cost_nanos)

    def to_json(self) -> str:
        limits: dict[str, object] = {}
        if self.max_budget_tokens is not None:
            limits["maxBudgetTokens"] = self.max_budget_tokens
        if self.max_budget_cost_nanos is not None:
            usd = Decimal(self.max_budget_cost_nanos) / NANOS_PER_USD
            limits["maxBudgetCostUsd"] = float(usd)
        document = {
            "budget": {
                "supported": True,
                "dimensions": list(self.dimensions),
                "enforce": self.enforce,
                "scopes": list(self.scopes),
            },
            "limits": limits,
        }
        return json.dumps(document, separators=(",", ":"), sort_keys=True)
