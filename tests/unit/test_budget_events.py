"""Budget events: exact OpenWOP v1 payloads, exact USD rendering, closed schemas, no pricing."""

from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budget_service.domain.events import (
    OPENWOP_PAYLOAD_SCHEMAS,
    BudgetConsumed,
    BudgetEvent,
    BudgetExhausted,
    BudgetReserved,
    CapBreached,
    RunFailed,
    ThresholdCrossed,
    decode,
    payload,
    render_amount,
    usd_text,
)
from budget_service.domain.policy import Dimension, EffectiveBudget, OnExhaustion, Scope

USD = 10**9
SAMPLES: list[BudgetEvent] = [
    BudgetReserved(EffectiveBudget(max_tokens=200_000, max_cost_nanos=USD), Scope.RUN),
    BudgetReserved(EffectiveBudget(), Scope.PROJECT),
    BudgetConsumed(Dimension.COST, 700_000_000, USD, 300_000_000),
    BudgetConsumed(Dimension.TOKENS, 1200, 1000, 0),
    ThresholdCrossed(Dimension.COST, 800_000_000, USD, 80),
    BudgetExhausted(Dimension.TOOL_CALLS, 2, 2),
    CapBreached(Dimension.COST, USD, 1_020_000_000),
    CapBreached(Dimension.RETRIES, 0, 1),
    RunFailed("budget exhausted: cost limit 1.0, observed 1.02"),
]


@pytest.mark.parametrize(
    ("nanos", "text"),
    [
        (0, "0.0"),
        (1, "0.000000001"),
        (800_000_000, "0.8"),
        (1_000_000_000, "1.0"),
        (1_020_000_000, "1.02"),
        (100 * USD, "100.0"),
        (10**18, "1000000000.0"),
        (999_999_999_999_999_999, "999999999.999999999"),
    ],
)
def test_usd_text_is_exact(nanos: int, text: str) -> None:
    assert usd_text(nanos) == text


def test_usd_text_refuses_negative_amounts() -> None:
    with pytest.raises(ValueError, match="negative"):
        usd_text(-1)


@given(st.integers(min_value=0, max_value=10**18))
def test_usd_text_round_trips_through_decimal_without_loss(nanos: int) -> None:
    text = usd_text(nanos)
    assert Decimal(text) * USD == nanos
    assert "." in text
    assert "e" not in text.lower()


def test_render_amount_uses_usd_only_for_cost() -> None:
    assert render_amount(Dimension.COST, 1_020_000_000) == "1.02"
    assert render_amount(Dimension.TOKENS, 1_020_000_000) == "1020000000"


def test_event_types_are_the_openwop_names() -> None:
    assert [type(e).event_type for e in SAMPLES[1:]] == [
        "budget.reserved",
        "budget.consumed",
        "budget.consumed",
        "budget.threshold.crossed",
        "budget.exhausted",
        "cap.breached",
        "cap.breached",
        "run.failed",
    ]
    assert set(OPENWOP_PAYLOAD_SCHEMAS) == {type(e).event_type for e in SAMPLES}


def test_budget_reserved_payload() -> None:
    event = BudgetReserved(
        EffectiveBudget(max_tokens=200_000, max_cost_nanos=USD, max_tool_calls=50, max_retries=0),
        Scope.WORKFLOW,
    )
    assert event.payload_json() == (
        '{"effectiveBudget":{"maxTokens":200000,"maxCostUsd":1.0,"maxToolCalls":50,'
        '"maxRetries":0},"scope":"workflow"}'
    )
    assert payload(BudgetReserved(EffectiveBudget(), Scope.RUN)) == {
        "effectiveBudget": {},
        "scope": "run",
    }


def test_budget_consumed_payload() -> None:
    event = BudgetConsumed(Dimension.COST, 700_000_000, USD, 300_000_000)
    assert payload(event) == {"dimension": "cost", "consumed": 0.7, "limit": 1.0, "remaining": 0.3}


def test_threshold_crossed_payload_matches_the_rfc_trace() -> None:
    event = ThresholdCrossed(Dimension.COST, 800_000_000, USD, 80)
    assert event.payload_json() == '{"dimension":"cost","consumed":0.8,"limit":1.0,"percent":80}'


def test_exhausted_payload() -> None:
    event = BudgetExhausted(Dimension.TOOL_CALLS, 2, 2)
    assert payload(event) == {"dimension": "toolCalls", "consumed": 2, "limit": 2}


def test_cap_breached_payload_matches_the_rfc_trace() -> None:
    assert payload(CapBreached(Dimension.COST, USD, 1_020_000_000)) == {
        "kind": "budget-cost",
        "limit": 1.0,
        "observed": 1.02,
    }
    assert payload(CapBreached(Dimension.TOOL_CALLS, 2, 3)) == {
        "kind": "budget-tool-calls",
        "limit": 2,
        "observed": 3,
    }
    assert CapBreached(Dimension.TOKENS, 1, 2).kind == "budget-tokens"
    assert CapBreached(Dimension.RETRIES, 1, 2).kind == "budget-retries"


def test_run_failed_payload() -> None:
    assert payload(RunFailed("budget exhausted")) == {
        "error": {"code": "budget_exhausted", "message": "budget exhausted"}
    }


def test_cost_is_always_a_json_float_and_counts_always_integers() -> None:
    limit = payload(BudgetExhausted(Dimension.COST, 0, USD))["limit"]
    assert limit == 1.0
    assert isinstance(limit, float)
    assert isinstance(payload(BudgetExhausted(Dimension.TOKENS, 0, 5))["limit"], int)


def test_large_costs_are_exact_in_the_json_text() -> None:
    event = BudgetConsumed(Dimension.COST, 123_456_789_123_456_789, 10**18, 0)
    decoded = json.loads(event.payload_json(), parse_float=Decimal)
    assert decoded["consumed"] == Decimal("123456789.123456789")


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).event_type)
def test_every_payload_validates_against_its_closed_schema(event: BudgetEvent) -> None:
    schema = OPENWOP_PAYLOAD_SCHEMAS[type(event).event_type]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(payload(event), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    ("event_type", "bad"),
    [
        ("budget.consumed", {"dimension": "cost", "consumed": 1, "limit": 1, "pricePerToken": 0.1}),
        ("budget.consumed", {"dimension": "wallTime", "consumed": 1, "limit": 1}),
        (
            "budget.threshold.crossed",
            {"dimension": "cost", "consumed": 1, "limit": 1, "percent": 101},
        ),
        ("budget.exhausted", {"dimension": "cost", "consumed": -1, "limit": 1}),
        ("budget.reserved", {"effectiveBudget": {"maxWallTimeMs": 5}, "scope": "run"}),
        ("budget.reserved", {"effectiveBudget": {}, "scope": "host"}),
        ("cap.breached", {"kind": "budget-cost", "limit": 1, "observed": 2, "rateCard": {}}),
        ("run.failed", {"error": {"code": "budget_exhausted", "message": ""}}),
    ],
)
def test_schemas_reject_extra_keys_and_out_of_range_values(
    event_type: str, bad: dict[str, object]
) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, OPENWOP_PAYLOAD_SCHEMAS[event_type])


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).event_type)
def test_no_pricing_leaks_into_any_payload(event: BudgetEvent) -> None:
    text = event.payload_json().lower()
    for word in ("price", "rate", "pertoken", "per_token", "input", "output", "model"):
        assert word not in text


@given(
    st.sampled_from(list(Dimension)),
    st.integers(min_value=0, max_value=10**18),
    st.integers(min_value=0, max_value=10**18),
)
def test_generated_payloads_always_validate(
    dimension: Dimension, consumed: int, limit: int
) -> None:
    remaining = max(0, limit - consumed)
    events: list[BudgetEvent] = [
        BudgetConsumed(dimension, consumed, limit, remaining),
        ThresholdCrossed(dimension, consumed, limit, 80),
        BudgetExhausted(dimension, consumed, limit),
        CapBreached(dimension, limit, consumed),
    ]
    for event in events:
        jsonschema.validate(payload(event), OPENWOP_PAYLOAD_SCHEMAS[type(event).event_type])


# --- decoding stored payloads ------------------------------------------------------------


@pytest.mark.parametrize("event", SAMPLES)
def test_decoding_a_stored_payload_gives_the_event_back(event: BudgetEvent) -> None:
    decoded = decode(type(event).event_type, event.payload_json(), EffectiveBudget())
    assert decoded == event


def test_decoding_budget_reserved_takes_threshold_and_on_exhaustion_from_the_run() -> None:
    run = EffectiveBudget(max_tokens=5, threshold_percent=50, on_exhaustion=OnExhaustion.INTERRUPT)
    event = BudgetReserved(EffectiveBudget(max_tokens=7, max_cost_nanos=1), Scope.AGENT)
    decoded = decode(event.event_type, event.payload_json(), run)
    assert isinstance(decoded, BudgetReserved)
    assert (decoded.effective_budget.max_tokens, decoded.effective_budget.max_cost_nanos) == (7, 1)
    assert decoded.effective_budget.threshold_percent == 50
    assert decoded.effective_budget.on_exhaustion is OnExhaustion.INTERRUPT
    assert decoded.scope is Scope.AGENT


@given(st.integers(min_value=0, max_value=10**18), st.integers(min_value=0, max_value=10**18))
def test_cost_amounts_survive_the_json_round_trip_exactly(consumed: int, limit: int) -> None:
    event = BudgetConsumed(Dimension.COST, consumed, limit, max(0, limit - consumed))
    assert decode(event.event_type, event.payload_json()) == event


def test_decoding_an_unknown_type_fails_loudly() -> None:
    with pytest.raises(ValueError, match="unknown budget event type"):
        decode("budget.mystery", '{"dimension":"cost","consumed":1,"limit":1}')
