"""Domain metrics: a Tally counts events, decisions and holds; labels stay bounded and id-free."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from budget_service.adapters.metrics import BudgetMetrics, Tally
from budget_service.domain import events as ev
from budget_service.domain.policy import Dimension, Enforcement, Scope
from budget_service.domain.run_state import Balance, BalanceRef, ReservationState
from servicekit.labels import MetricLabels


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_a_tally_is_counted_only_when_applied() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry)
    tally = Tally()
    tally.decision("reserve", "granted")
    tally.consumed("t1", "acme", "gpt-4o", {Dimension.TOKENS: 120, Dimension.COST: 1_500_000_000})
    tally.events(
        [
            ev.ThresholdCrossed(Dimension.COST, 8, 10, 80),
            ev.BudgetExhausted(Dimension.COST, 10, 10),
            ev.CapBreached(Dimension.COST, 10, 11),
        ],
        Enforcement.ADVISORY,
    )
    tally.reservations_ended([ReservationState.EXPIRED, ReservationState.CONSUMED])
    tally.overruns({Dimension.TOKENS: 5, Dimension.COST: 0})
    assert "ration_budget_consumed_tokens_total{" not in exposition(registry)
    metrics.apply(tally)
    text = exposition(registry)
    for line in [
        'ration_budget_consumed_tokens_total{model="gpt-4o"} 120.0',
        'ration_budget_consumed_cost_usd_total{model="gpt-4o"} 1.5',
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
    assert "acme" not in text
    assert "t1" not in text


def pool(tenant: str, scope_id: str, **limits_and_consumed: tuple[int, int]) -> Any:
    """A pooled budget's balances: dimension name → (limit, consumed)."""
    balances = {
        Dimension(name): Balance(limit, consumed)
        for name, (limit, consumed) in limits_and_consumed.items()
    }
    return (tenant, BalanceRef(Scope.PROJECT, scope_id), balances)


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_pool_gauges_rank_the_most_depleted_pools_without_ids_by_default() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry, MetricLabels(max_pools=2))
    metrics.set_pools(
        [
            pool("t1", "roomy", tokens=(1000, 100), cost=(10 * 10**9, 10**9)),
            pool("t2", "tight", tokens=(100, 95)),
            pool("t1", "half", tokens=(10_000, 5_000)),
        ]
    )
    remaining = samples(registry, "ration_budget_pool_remaining_tokens")
    limits = samples(registry, "ration_budget_pool_limit_tokens")
    first = (("rank", "1"), ("scope", "project"))
    second = (("rank", "2"), ("scope", "project"))
    assert remaining == {first: 5.0, second: 5000.0}  # 5 % left, then 50 %; "roomy" not shown
    assert limits == {first: 100.0, second: 10_000.0}
    assert samples(registry, "ration_budget_pool_remaining_usd") == {first: 9.0}
    assert samples(registry, "ration_budget_pool_limit_usd") == {first: 10.0}
    text = exposition(registry)
    for private in ("t1", "t2", "roomy", "tight", "half", "tenant", "scope_id"):
        assert private not in text, private


def test_pool_gauges_drop_pools_that_disappeared() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry)
    metrics.set_pools([pool("t", "a", tokens=(10, 5)), pool("t", "b", tokens=(10, 1))])
    metrics.set_pools([pool("t", "a", tokens=(10, 7))])
    assert samples(registry, "ration_budget_pool_remaining_tokens") == {
        (("rank", "1"), ("scope", "project")): 3.0
    }


def test_pool_gauges_name_tenant_and_pool_only_when_the_operator_opts_in() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry, MetricLabels(tenant_labels=True, max_tenant_values=1))
    metrics.set_pools([pool("t1", "a", tokens=(10, 5)), pool("t2", "b", tokens=(10, 1))])
    assert samples(registry, "ration_budget_pool_remaining_tokens") == {
        (("rank", "1"), ("scope", "project"), ("scope_id", "a"), ("tenant", "t1")): 5.0,
        # past the one distinct value each label may take
        (("rank", "2"), ("scope", "project"), ("scope_id", "other"), ("tenant", "other")): 9.0,
    }


def test_spend_labels_bound_models_and_name_projects_only_when_opted_in() -> None:
    registry = CollectorRegistry()
    labels = MetricLabels(model_allow=("gpt-*",), max_models=2, tenant_labels=True)
    metrics = BudgetMetrics(registry, labels)
    tally = Tally()
    for model in ("gpt-4o", "claude-3", "gpt-4o-mini", "gpt-5", "gpt-4o"):
        tally.consumed("t1", "acme", model, {Dimension.TOKENS: 1})
    metrics.apply(tally)
    assert samples(registry, "ration_budget_consumed_tokens_total") == {
        (("model", "gpt-4o"), ("project", "acme"), ("tenant", "t1")): 2.0,
        (("model", "gpt-4o-mini"), ("project", "acme"), ("tenant", "t1")): 1.0,
        # not allow-listed, then past the two distinct models
        (("model", "other"), ("project", "acme"), ("tenant", "t1")): 2.0,
    }


def test_reserve_refusals_count_the_scope_that_refused() -> None:
    registry = CollectorRegistry()
    metrics = BudgetMetrics(registry)
    tally = Tally()
    tally.refused("BUDGET_EXHAUSTED", Scope.PROJECT)
    tally.refused("BUDGET_HELD", Scope.RUN)
    metrics.apply(tally)
    text = exposition(registry)
    assert 'ration_budget_refusals_total{reason="BUDGET_EXHAUSTED",scope="project"} 1.0' in text
    assert 'ration_budget_refusals_total{reason="BUDGET_HELD",scope="run"} 1.0' in text
    assert 'decision="reserve",outcome="refused",reason="BUDGET_HELD"} 1.0' in text
