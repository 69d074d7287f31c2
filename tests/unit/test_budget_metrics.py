"""Domain metrics: a Tally counts events, decisions and holds; labels stay bounded."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from budget_service import events as ev
from budget_service.metrics import BudgetMetrics, Tally
from budget_service.policy import Dimension, Enforcement
from budget_service.state import HoldState


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_a_tally_is_counted_only_when_applied() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry)
    tally = Tally()
    tally.decision("reserve", "granted")
    tally.consumed("acme", "gpt-4o", {Dimension.TOKENS: 120, Dimension.COST: 1_500_000_000})
    tally.events(
        [
            ev.ThresholdCrossed(Dimension.COST, 8, 10, 80),
            ev.BudgetExhausted(Dimension.COST, 10, 10),
            ev.CapBreached(Dimension.COST, 10, 11),
        ],
        Enforcement.ADVISORY,
    )
    tally.holds_ended([HoldState.EXPIRED, HoldState.CONSUMED])
    tally.overruns({Dimension.TOKENS: 5, Dimension.COST: 0})
    assert "ration_budget_consumed_tokens_total{" not in exposition(registry)
    metrics.apply(tally)
    text = exposition(registry)
    for line in [
        'ration_budget_consumed_tokens_total{model="gpt-4o",project="acme"} 120.0',
        'ration_budget_consumed_cost_usd_total{model="gpt-4o",project="acme"} 1.5',
        'ration_budget_threshold_crossings_total{dimension="cost"} 1.0',
        'ration_budget_exhaustions_total{dimension="cost"} 1.0',
        'ration_budget_breaches_total{dimension="cost",enforcement="advisory"} 1.0',
        'ration_budget_holds_ended_total{state="expired"} 1.0',
        "ration_budget_holds_expired_total 1.0",
        'ration_budget_decisions_total{decision="expire",outcome="recorded",reason=""} 1.0',
        'ration_budget_overruns_total{dimension="tokens"} 1.0',
    ]:
        assert line in text, line
    assert 'ration_budget_overruns_total{dimension="cost"}' not in text


def test_pool_gauges_drop_pools_that_disappeared() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry)
    metrics.set_pools({("t", "project", "a", "tokens"): 5.0, ("t", "project", "b", "cost"): 0.5})
    metrics.set_pools({("t", "project", "a", "tokens"): 3.0})
    text = exposition(registry)
    assert (
        'ration_budget_pool_remaining{dimension="tokens",scope="project",scope_id="a",tenant="t"}'
        " 3.0" in text
    )
    assert 'scope_id="b"' not in text
