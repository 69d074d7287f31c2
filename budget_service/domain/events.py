"""Budget events: typed dataclasses and their exact OpenWOP v1 JSON payloads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from budget_service.domain.policy import (
    RFC_SCOPES,
    AnyDimension,
    Dimension,
    EffectiveBudget,
    Scope,
    dimension_named,
)

NANOS_PER_USD = 10**9


def usd_text(nanos: int) -> str:
    """Exact USD decimal text for a nanos amount: 1_020_000_000 -> "1.02", 10**9 -> "1.0".

    Built from integer division, never a float: 18-digit amounts would lose digits as floats.
    Integral amounts keep ".0" so every cost reads back as a JSON float, one type per field.
    """
    if nanos < 0:
        raise ValueError("cost amounts are never negative")
    whole, fraction = divmod(nanos, NANOS_PER_USD)
    return f"{whole}.{f'{fraction:09d}'.rstrip('0') or '0'}"


def render_amount(dimension: AnyDimension, value: int) -> str:
    """An amount as its JSON number text (cost in USD, everything else a plain integer)."""
    return usd_text(value) if dimension is Dimension.COST else str(value)


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _object(*members: tuple[str, str]) -> str:
    """A JSON object from (key, already-encoded value) pairs, in order, compact separators."""
    return "{" + ",".join(f"{_string(key)}:{value}" for key, value in members) + "}"


@dataclass(frozen=True)
class BudgetReserved:
    """At OpenRun and at each ResumeRun: the effective budget the run is judged under."""

    event_type: ClassVar[str] = "budget.reserved"
    effective_budget: EffectiveBudget
    scope: Scope

    def payload_json(self) -> str:
        budget = self.effective_budget
        limits = [
            ("maxTokens", budget.max_tokens, Dimension.TOKENS),
            ("maxCostUsd", budget.max_cost_nanos, Dimension.COST),
            ("maxToolCalls", budget.max_tool_calls, Dimension.TOOL_CALLS),
            ("maxRetries", budget.max_retries, Dimension.RETRIES),
        ]
        present = [(key, render_amount(d, v)) for key, v, d in limits if v is not None]
        return _object(("effectiveBudget", _object(*present)), ("scope", _string(self.scope)))


@dataclass(frozen=True)
class BudgetConsumed:
    """Per bounded dimension touched by a Consume; `remaining` is max(0, limit - consumed)."""

    event_type: ClassVar[str] = "budget.consumed"
    dimension: AnyDimension
    consumed: int
    limit: int
    remaining: int

    def payload_json(self) -> str:
        d = self.dimension
        return _object(
            ("dimension", _string(d)),
            ("consumed", render_amount(d, self.consumed)),
            ("limit", render_amount(d, self.limit)),
            ("remaining", render_amount(d, self.remaining)),
        )


@dataclass(frozen=True)
class ThresholdCrossed:
    """Once per dimension (per budget), when consumption first reaches `percent` of the limit."""

    event_type: ClassVar[str] = "budget.threshold.crossed"
    dimension: AnyDimension  # modelCalls: a pool's own event only
    consumed: int
    limit: int
    percent: int

    def payload_json(self) -> str:
        d = self.dimension
        return _object(
            ("dimension", _string(d)),
            ("consumed", render_amount(d, self.consumed)),
            ("limit", render_amount(d, self.limit)),
            ("percent", str(self.percent)),
        )


@dataclass(frozen=True)
class BudgetExhausted:
    """Once per dimension (per budget): consumed reached the limit, or a breach was attempted."""

    event_type: ClassVar[str] = "budget.exhausted"
    dimension: AnyDimension  # modelCalls: a pool's own event only
    consumed: int
    limit: int

    def payload_json(self) -> str:
        d = self.dimension
        return _object(
            ("dimension", _string(d)),
            ("consumed", render_amount(d, self.consumed)),
            ("limit", render_amount(d, self.limit)),
        )


@dataclass(frozen=True)
class CapBreached:
    """An attempt beyond the limit; `observed` is what the attempt would reach or reached."""

    event_type: ClassVar[str] = "cap.breached"
    dimension: Dimension
    limit: int
    observed: int

    @property
    def kind(self) -> str:
        return self.dimension.breach_kind

    def payload_json(self) -> str:
        d = self.dimension
        return _object(
            ("kind", _string(self.kind)),
            ("limit", render_amount(d, self.limit)),
            ("observed", render_amount(d, self.observed)),
        )


@dataclass(frozen=True)
class RunFailed:
    """The run stopped for good; the code is the RFC's `budget_exhausted`."""

    event_type: ClassVar[str] = "run.failed"
    message: str
    code: str = "budget_exhausted"

    def payload_json(self) -> str:
        error = _object(("code", _string(self.code)), ("message", _string(self.message)))
        return _object(("error", error))


BudgetEvent = (
    BudgetReserved | BudgetConsumed | ThresholdCrossed | BudgetExhausted | CapBreached | RunFailed
)


def payload(event: BudgetEvent) -> dict[str, Any]:
    """The payload as Python values (cost as float: for reading and tests, not for re-encoding)."""
    decoded: dict[str, Any] = json.loads(event.payload_json())
    return decoded


_DIMENSION: dict[str, Any] = {"type": "string", "enum": [d.value for d in Dimension]}
_AMOUNT: dict[str, Any] = {"type": "number", "minimum": 0}


def _closed(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


# The OpenWOP v1 `run-event-payloads.schema.json` $defs for our six event types, with
# additionalProperties closed everywhere: upstream leaves capBreached and runFailed open, and we
# emit exactly the closed subset so a host can forward them verbatim to strict consumers. The
# capBreached kind enum is narrowed to the four budget-* kinds, the only ones this service emits.
OPENWOP_PAYLOAD_SCHEMAS: dict[str, dict[str, Any]] = {
    BudgetReserved.event_type: _closed(
        ["effectiveBudget", "scope"],
        {
            "effectiveBudget": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "maxTokens": {"type": "integer", "minimum": 0},
                    "maxCostUsd": {"type": "number", "minimum": 0},
                    "maxToolCalls": {"type": "integer", "minimum": 0},
                    "maxRetries": {"type": "integer", "minimum": 0},
                },
            },
            "scope": {"type": "string", "enum": [s.value for s in RFC_SCOPES]},
        },
    ),
    BudgetConsumed.event_type: _closed(
        ["dimension", "consumed", "limit"],
        {"dimension": _DIMENSION, "consumed": _AMOUNT, "limit": _AMOUNT, "remaining": _AMOUNT},
    ),
    ThresholdCrossed.event_type: _closed(
        ["dimension", "consumed", "limit", "percent"],
        {
            "dimension": _DIMENSION,
            "consumed": _AMOUNT,
            "limit": _AMOUNT,
            "percent": {"type": "number", "minimum": 0, "maximum": 100},
        },
    ),
    BudgetExhausted.event_type: _closed(
        ["dimension", "consumed", "limit"],
        {"dimension": _DIMENSION, "consumed": _AMOUNT, "limit": _AMOUNT},
    ),
    CapBreached.event_type: _closed(
        ["kind", "limit", "observed"],
        {
            "kind": {"type": "string", "enum": [d.breach_kind for d in Dimension]},
            "limit": _AMOUNT,
            "observed": _AMOUNT,
        },
    ),
    RunFailed.event_type: _closed(
        ["error"],
        {
            "error": {
                "type": "object",
                "additionalProperties": False,
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "minLength": 1},
                    "message": {"type": "string", "minLength": 1},
                },
            }
        },
    ),
}


def _amount(dimension: AnyDimension, value: Decimal | int) -> int:
    """A JSON amount back to native units, exactly (cost USD text to nanos)."""
    if dimension is Dimension.COST:
        return int(Decimal(value) * NANOS_PER_USD)
    return int(value)


_LIMIT_KEYS = (
    ("maxTokens", Dimension.TOKENS),
    ("maxCostUsd", Dimension.COST),
    ("maxToolCalls", Dimension.TOOL_CALLS),
    ("maxRetries", Dimension.RETRIES),
)
_BY_KIND = {d.breach_kind: d for d in Dimension}


def decode(event_type: str, payload_json: str, base: EffectiveBudget | None = None) -> BudgetEvent:
    """A stored payload back to its typed event. `budget.reserved` carries only limits and
    scope; threshold and on_exhaustion come from `base` (they never change within a run)."""
    data: dict[str, Any] = json.loads(payload_json, parse_float=Decimal)
    if event_type == BudgetReserved.event_type:
        limits = data["effectiveBudget"]
        budget = (base or EffectiveBudget()).with_limits(
            {d: _amount(d, limits[key]) if key in limits else None for key, d in _LIMIT_KEYS}
        )
        return BudgetReserved(budget, Scope(data["scope"]))
    if event_type == RunFailed.event_type:
        return RunFailed(data["error"]["message"], data["error"]["code"])
    if event_type == CapBreached.event_type:
        kind = _BY_KIND[data["kind"]]
        return CapBreached(kind, _amount(kind, data["limit"]), _amount(kind, data["observed"]))
    d = dimension_named(data["dimension"])  # a pool's own events may name "modelCalls"
    consumed, limit = _amount(d, data["consumed"]), _amount(d, data["limit"])
    if event_type == BudgetConsumed.event_type:
        return BudgetConsumed(d, consumed, limit, _amount(d, data["remaining"]))
    if event_type == ThresholdCrossed.event_type:
        return ThresholdCrossed(d, consumed, limit, int(data["percent"]))
    if event_type == BudgetExhausted.event_type:
        return BudgetExhausted(d, consumed, limit)
    raise ValueError(f"unknown budget event type {event_type!r}")
