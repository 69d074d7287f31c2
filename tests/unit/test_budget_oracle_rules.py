"""The reference model's rules (tests/support/oracle.py): reserve decisions, consume events,
breaches, resume, refusals, and the correctness bar (granted consumed + held <= limit) under
random interleavings. The service is compared with this model in
tests/integration/test_budget_oracle_differential.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget_service.domain.events import (
    BudgetConsumed,
    BudgetEvent,
    BudgetExhausted,
    BudgetReserved,
    CapBreached,
    RunFailed,
    ThresholdCrossed,
    payload,
)
from budget_service.domain.policy import (
    BudgetPolicy,
    Dimension,
    EffectiveBudget,
    Enforcement,
    HostCeilings,
    OnExhaustion,
    Scope,
    resolve_effective_budget,
)
from budget_service.domain.run_state import (
    RUN_BALANCE,
    Balance,
    BalanceRef,
    Breach,
    Contention,
    ReservationState,
    ReserveMode,
    RunState,
    RunStatus,
)
from tests.support.oracle import (
    Invalid,
    apply_consume,
    apply_reservation,
    apply_reserve_breach,
    apply_resume,
    decide_reserve,
    effective_reservation_state,
    exhausted_refusal,
    held_refusal,
    resume_refusal,
    settle_reservation,
    state_refusal,
    threshold_reached,
)

USD = 10**9
T, C, TC, R = Dimension.TOKENS, Dimension.COST, Dimension.TOOL_CALLS, Dimension.RETRIES
ADVISORY = Enforcement.ADVISORY
POOL = BalanceRef(Scope.PROJECT, "p1")


def run_balances(budget: EffectiveBudget) -> dict[Dimension, Balance]:
    return {d: Balance(budget.limit(d)) for d in Dimension}


def trace(events: tuple[BudgetEvent, ...]) -> list[tuple[str, dict[str, object]]]:
    return [(type(e).event_type, payload(e)) for e in events]


# --- reserve decisions -----------------------------------------------------------------------


def test_reserve_grants_what_fits() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=40, held=20)}}
    decision = decide_reserve(balances, {T: 40})
    assert dict(decision.granted) == {T: 40}
    assert not decision.would_refuse
    assert not decision.refused


def test_reserve_is_a_breach_when_it_cannot_fit_even_without_holds() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=90, held=5)}}
    decision = decide_reserve(balances, {T: 11})
    assert decision.breach == Breach(T, 100, 90, 101, RUN_BALANCE)
    assert decision.contention is None
    assert decision.refused
    assert dict(decision.granted) == {}


def test_reserve_is_contention_when_only_holds_are_in_the_way() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=50, held=40)}}
    decision = decide_reserve(balances, {T: 20})
    assert decision.contention == Contention(T, 100, 50, 40, 20, RUN_BALANCE)
    assert decision.breach is None
    assert decision.refused


def test_exactly_filling_the_limit_is_granted() -> None:
    balances = {RUN_BALANCE: {TC: Balance(2, consumed=1, held=0)}}
    assert dict(decide_reserve(balances, {TC: 1}).granted) == {TC: 1}


def test_unbounded_and_zero_dimensions_are_not_checked() -> None:
    balances = {RUN_BALANCE: {T: Balance(None, consumed=10**12), C: Balance(0, consumed=5)}}
    decision = decide_reserve(balances, {T: 10**6, C: 0})
    assert dict(decision.granted) == {T: 10**6}
    assert not decision.would_refuse


def test_dimensions_are_checked_in_fixed_order() -> None:
    balances = {RUN_BALANCE: {T: Balance(1), C: Balance(1), TC: Balance(1), R: Balance(0)}}
    decision = decide_reserve(balances, {R: 1, TC: 2, C: 2})
    assert decision.breach is not None
    assert decision.breach.dimension is C


def test_breach_outranks_contention_across_balances() -> None:
    balances = {
        RUN_BALANCE: {T: Balance(100, consumed=0, held=100)},  # contention on the run
        POOL: {C: Balance(USD, consumed=USD)},  # breach on the pool
    }
    decision = decide_reserve(balances, {T: 1, C: 1})
    assert decision.breach == Breach(C, USD, USD, USD + 1, POOL)
    assert decision.contention is None


def test_the_run_is_judged_before_pools_and_pools_in_canonical_order() -> None:
    agent_pool, project_pool = BalanceRef(Scope.AGENT, "z"), BalanceRef(Scope.PROJECT, "a")
    balances = {
        project_pool: {T: Balance(0)},
        agent_pool: {T: Balance(0)},
        RUN_BALANCE: {T: Balance(0)},
    }
    assert decide_reserve(balances, {T: 1}).breach == Breach(T, 0, 0, 1, RUN_BALANCE)
    del balances[RUN_BALANCE]
    assert decide_reserve(balances, {T: 1}).breach == Breach(T, 0, 0, 1, agent_pool)
    assert RUN_BALANCE.sort_key < agent_pool.sort_key < project_pool.sort_key


def test_a_reserve_must_fit_every_pool() -> None:
    balances = {RUN_BALANCE: {C: Balance(10 * USD)}, POOL: {C: Balance(USD, held=USD)}}
    decision = decide_reserve(balances, {C: 1})
    assert decision.contention is not None
    assert decision.contention.balance == POOL


def test_up_to_grants_the_smallest_remainder_across_balances() -> None:
    balances = {
        RUN_BALANCE: {T: Balance(1000, consumed=100, held=100), C: Balance(USD)},
        POOL: {T: Balance(10_000, consumed=9_500)},
    }
    decision = decide_reserve(balances, {T: 5000, C: 10}, ReserveMode.UP_TO)
    assert dict(decision.granted) == {T: 500, C: 10}


def test_up_to_never_shrinks_tool_calls_or_retries() -> None:
    balances = {RUN_BALANCE: {TC: Balance(3, consumed=2)}}
    decision = decide_reserve(balances, {TC: 2}, ReserveMode.UP_TO)
    assert decision.breach == Breach(TC, 3, 2, 4, RUN_BALANCE)


def test_up_to_is_contention_when_holds_take_everything_left() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=90, held=10)}}
    decision = decide_reserve(balances, {T: 50}, ReserveMode.UP_TO)
    assert decision.contention == Contention(T, 100, 90, 10, 50, RUN_BALANCE)


def test_up_to_is_a_breach_only_when_the_balance_is_spent() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=100)}}
    decision = decide_reserve(balances, {T: 50}, ReserveMode.UP_TO)
    assert decision.breach == Breach(T, 100, 100, 150, RUN_BALANCE)


def test_advisory_grants_the_full_estimate_and_reports_the_would_be_refusal() -> None:
    balances = {RUN_BALANCE: {T: Balance(100, consumed=100)}, POOL: {C: Balance(1, held=1)}}
    decision = decide_reserve(balances, {T: 10, C: 1}, ReserveMode.UP_TO, ADVISORY)
    assert dict(decision.granted) == {T: 10, C: 1}
    assert decision.breach is not None
    assert decision.would_refuse
    assert not decision.refused


# --- holds -----------------------------------------------------------------------------------


def test_hold_consume_release_arithmetic() -> None:
    run = {T: Balance(100), C: Balance(None)}
    held = apply_reservation(run, {T: 30, C: 5})
    assert held[T] == Balance(100, 0, 30)
    assert held[C] == Balance(None, 0, 5)
    assert held[TC] == Balance(None)  # missing dimensions are unbounded, still tracked
    consumed = settle_reservation(held, {T: 30, C: 5}, {T: 45})
    assert consumed[T] == Balance(100, 45, 0)
    assert consumed[C] == Balance(None, 0, 0)
    released = settle_reservation(apply_reservation(consumed, {T: 10}), {T: 10})
    assert released[T] == Balance(100, 45, 0)


def test_settling_more_than_is_held_is_a_bug_not_a_refusal() -> None:
    with pytest.raises(ValueError, match="only 5 is held"):
        settle_reservation({T: Balance(100, held=5)}, {T: 6})


def test_remaining_never_goes_negative() -> None:
    assert Balance(100, consumed=120, held=10).remaining == 0
    assert Balance(None, consumed=5).remaining is None
    assert Balance(100, consumed=20, held=30).remaining == 50


# --- consume ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("consumed", "limit", "percent", "reached"),
    [
        (79, 100, 80, False),
        (80, 100, 80, True),
        (1, 3, 33, True),  # 33.3% >= 33%: exact, no float rounding
        (1, 3, 34, False),
        (0, 100, 0, False),  # nothing consumed never crosses
        (1, 100, 0, True),
        (99, 100, 100, False),
        (100, 100, 100, True),
        (1, 0, 100, True),
        (10**18, 10**18 + 1, 100, False),
    ],
)
def test_threshold_is_exact_integer_arithmetic(
    consumed: int, limit: int, percent: int, reached: bool
) -> None:
    assert threshold_reached(consumed, limit, percent) is reached


def test_rfc_cost_trace_consumed_threshold_exhausted_breached_failed() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_cost_nanos=USD, threshold_percent=80))
    assert trace((BudgetReserved(budget, budget.scope),)) == [
        ("budget.reserved", {"effectiveBudget": {"maxCostUsd": 1.0}, "scope": "run"})
    ]
    balances, status = run_balances(budget), RunStatus()
    events: list[tuple[str, dict[str, object]]] = []
    for usage in (500_000_000, 300_000_000, 220_000_000):
        outcome = apply_consume(balances, None, {C: usage}, budget, status)
        balances, status = dict(outcome.balances), outcome.status
        events += trace(outcome.events)
    assert events == [
        ("budget.consumed", {"dimension": "cost", "consumed": 0.5, "limit": 1.0, "remaining": 0.5}),
        ("budget.consumed", {"dimension": "cost", "consumed": 0.8, "limit": 1.0, "remaining": 0.2}),
        (
            "budget.threshold.crossed",
            {"dimension": "cost", "consumed": 0.8, "limit": 1.0, "percent": 80},
        ),
        (
            "budget.consumed",
            {"dimension": "cost", "consumed": 1.02, "limit": 1.0, "remaining": 0.0},
        ),
        ("budget.exhausted", {"dimension": "cost", "consumed": 1.02, "limit": 1.0}),
        ("cap.breached", {"kind": "budget-cost", "limit": 1.0, "observed": 1.02}),
        (
            "run.failed",
            {
                "error": {
                    "code": "budget_exhausted",
                    "message": "budget exhausted: cost limit 1.0, observed 1.02",
                }
            },
        ),
    ]
    assert status.state is RunState.FAILED
    assert status.stopped_by == Breach(C, USD, 1_020_000_000, 1_020_000_000)
    assert state_refusal(status) == {
        "reason": "BUDGET_EXHAUSTED",
        "dimension": "cost",
        "limit": "1.0",
        "observed": "1.02",
        "scope": "run",
        "scopeId": "",
    }


def test_rfc_tool_call_trace_third_reserve_breaches_and_fails_the_run() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tool_calls=2, threshold_percent=50))
    balances, status = run_balances(budget), RunStatus()
    events: list[BudgetEvent] = []
    for _ in range(2):
        assert state_refusal(status) is None
        decision = decide_reserve({RUN_BALANCE: balances}, {TC: 1})
        assert dict(decision.granted) == {TC: 1}
        outcome = apply_consume(
            apply_reservation(balances, decision.granted), decision.granted, {TC: 1}, budget, status
        )
        balances, status = dict(outcome.balances), outcome.status
        events += outcome.events
        assert dict(outcome.overrun) == {}
    decision = decide_reserve({RUN_BALANCE: balances}, {TC: 1})
    assert decision.refused
    assert decision.breach == Breach(TC, 2, 2, 3)
    breach = apply_reserve_breach(decision.breach, status, budget)
    events += breach.events
    assert [e.event_type for e in events] == [
        "budget.consumed",
        "budget.threshold.crossed",
        "budget.consumed",
        "budget.exhausted",
        "cap.breached",
        "run.failed",
    ]
    assert events[1] == ThresholdCrossed(TC, 1, 2, 50)
    assert events[3] == BudgetExhausted(TC, 2, 2)
    assert payload(events[4]) == {"kind": "budget-tool-calls", "limit": 2, "observed": 3}
    assert breach.status.state is RunState.FAILED


def test_exactly_spent_is_exhausted_but_not_breached() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=100))
    outcome = apply_consume(run_balances(budget), None, {T: 100}, budget, RunStatus())
    assert [e.event_type for e in outcome.events] == [
        "budget.consumed",
        "budget.threshold.crossed",
        "budget.exhausted",
    ]
    assert outcome.status.state is RunState.ACTIVE
    assert outcome.status.exhausted == {T}
    assert outcome.status.breached == frozenset()


def test_consume_events_follow_dimension_order_and_skip_unbounded_and_untouched() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=1000, max_retries=5))
    usage = {R: 1, T: 10, C: 7 * USD, TC: 0}
    outcome = apply_consume(run_balances(budget), None, usage, budget, RunStatus())
    assert outcome.events == (BudgetConsumed(T, 10, 1000, 990), BudgetConsumed(R, 1, 5, 4))
    assert outcome.balances[C] == Balance(None, 7 * USD, 0)  # recorded, just never reported


def test_threshold_and_exhaustion_fire_once_per_dimension() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=100, threshold_percent=10))
    balances, status = run_balances(budget), RunStatus()
    kinds: list[str] = []
    for _ in range(3):
        outcome = apply_consume(balances, None, {T: 40}, budget, status, ADVISORY)
        balances, status = dict(outcome.balances), outcome.status
        kinds += [e.event_type for e in outcome.events]
    assert kinds.count("budget.threshold.crossed") == 1
    assert kinds.count("budget.exhausted") == 1


def test_consume_settles_the_hold_and_reports_overrun() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=1000))
    balances = apply_reservation(run_balances(budget), {T: 100, C: 5})
    outcome = apply_consume(balances, {T: 100, C: 5}, {T: 130, C: 2, R: 1}, budget, RunStatus())
    assert outcome.balances[T] == Balance(1000, 130, 0)
    assert outcome.balances[C] == Balance(None, 2, 0)
    assert dict(outcome.overrun) == {T: 30, R: 1}
    without_reservation = apply_consume(run_balances(budget), None, {T: 130}, budget, RunStatus())
    assert dict(without_reservation.overrun) == {}


def test_consume_breach_with_interrupt_interrupts_without_run_failed() -> None:
    budget = resolve_effective_budget(
        BudgetPolicy(max_tokens=100, on_exhaustion=OnExhaustion.INTERRUPT)
    )
    outcome = apply_consume(run_balances(budget), None, {T: 150}, budget, RunStatus())
    assert [e.event_type for e in outcome.events][-2:] == ["budget.exhausted", "cap.breached"]
    assert outcome.status.state is RunState.INTERRUPTED
    assert outcome.status.stopped_by == Breach(T, 100, 150, 150)
    assert state_refusal(outcome.status) == {"reason": "RUN_INTERRUPTED", "state": "interrupted"}


def test_two_dimensions_breached_at_once_fail_the_run_once() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=10, max_cost_nanos=10))
    outcome = apply_consume(run_balances(budget), None, {T: 11, C: 11}, budget, RunStatus())
    types = [e.event_type for e in outcome.events]
    assert types.count("cap.breached") == 2
    assert types.count("run.failed") == 1
    assert types[-1] == "run.failed"
    assert outcome.status.stopped_by is not None
    assert outcome.status.stopped_by.dimension is T


def test_consume_on_a_failed_run_is_recorded_without_a_second_breach() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=10))
    first = apply_consume(run_balances(budget), None, {T: 11}, budget, RunStatus())
    later = apply_consume(first.balances, None, {T: 5}, budget, first.status)
    assert later.events == (BudgetConsumed(T, 16, 10, 0),)
    assert later.status == first.status


def test_advisory_consume_emits_events_only_never_cap_breached() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_cost_nanos=USD))
    balances, status = run_balances(budget), RunStatus()
    types: list[str] = []
    for _ in range(3):
        outcome = apply_consume(balances, None, {C: USD}, budget, status, ADVISORY)
        balances, status = dict(outcome.balances), outcome.status
        types += [e.event_type for e in outcome.events]
    assert types.count("budget.exhausted") == 1  # after threshold.crossed, at consumed >= limit
    assert types.index("budget.threshold.crossed") < types.index("budget.exhausted")
    assert "cap.breached" not in types  # RFC 0084 section E: advisory is events only
    assert "run.failed" not in types
    assert status.state is RunState.ACTIVE


def test_a_zero_cost_budget_breaches_on_the_first_cent() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_cost_nanos=0))
    outcome = apply_consume(run_balances(budget), None, {C: 1}, budget, RunStatus())
    assert [e.event_type for e in outcome.events] == [
        "budget.consumed",
        "budget.threshold.crossed",
        "budget.exhausted",
        "cap.breached",
        "run.failed",
    ]


# --- reserve breach --------------------------------------------------------------------------


def test_reserve_breach_emits_exhausted_first_when_not_yet_exhausted() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=100))
    breach = Breach(T, 100, 90, 120)
    outcome = apply_reserve_breach(breach, RunStatus(), budget)
    assert outcome.events == (
        BudgetExhausted(T, 90, 100),
        CapBreached(T, 100, 120),
        RunFailed("budget exhausted: tokens limit 100, observed 120"),
    )
    assert outcome.status.exhausted == {T}
    assert outcome.status.state is RunState.FAILED


def test_reserve_breach_with_interrupt_stops_without_run_failed() -> None:
    budget = resolve_effective_budget(
        BudgetPolicy(max_retries=0, on_exhaustion=OnExhaustion.INTERRUPT)
    )
    outcome = apply_reserve_breach(Breach(R, 0, 0, 1), RunStatus(exhausted=frozenset({R})), budget)
    assert outcome.events == (CapBreached(R, 0, 1),)
    assert outcome.status.state is RunState.INTERRUPTED


def test_a_pool_that_cannot_fit_refuses_naming_the_pool() -> None:
    breach = Breach(C, USD, USD, USD + 5, POOL)
    assert exhausted_refusal(breach) == {
        "reason": "BUDGET_EXHAUSTED",
        "dimension": "cost",
        "limit": "1.0",
        "observed": "1.000000005",
        "scope": POOL.scope.value,
        "scopeId": POOL.scope_id,
    }
    budget = resolve_effective_budget(BudgetPolicy())
    with pytest.raises(AssertionError):  # it never stops the run: not a run breach
        apply_reserve_breach(breach, RunStatus(), budget)


def test_advisory_reserve_breach_is_reported_not_applied() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=100))
    with pytest.raises(AssertionError):  # advisory mode emits nothing for a would-be refusal
        apply_reserve_breach(Breach(T, 100, 100, 101), RunStatus(), budget, ADVISORY)


# --- resume ----------------------------------------------------------------------------------


def test_resume_raises_bounded_limits_and_reactivates() -> None:
    budget = resolve_effective_budget(
        BudgetPolicy(max_tokens=100, max_tool_calls=2, on_exhaustion=OnExhaustion.INTERRUPT)
    )
    stopped = RunStatus(
        RunState.INTERRUPTED,
        crossed=frozenset({T, TC}),
        exhausted=frozenset({T, TC}),
        breached=frozenset({T}),
        stopped_by=Breach(T, 100, 100, 150),
    )
    outcome = apply_resume(budget, stopped, {T: 50, C: USD, TC: 0})
    assert (outcome.budget.max_tokens, outcome.budget.max_cost_nanos) == (150, None)
    assert outcome.budget.max_tool_calls == 2
    assert outcome.status == RunStatus(
        RunState.ACTIVE, frozenset({TC}), frozenset({TC}), frozenset(), None
    )
    assert outcome.events == (BudgetReserved(outcome.budget, Scope.RUN),)
    assert payload(outcome.events[0]) == {
        "effectiveBudget": {"maxTokens": 150, "maxToolCalls": 2},
        "scope": "run",
    }
    assert state_refusal(outcome.status) is None


def test_resume_never_passes_a_host_ceiling_nor_lowers_a_limit() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_cost_nanos=90 * USD))
    ceilings = HostCeilings(max_cost_nanos=100 * USD)
    raised = apply_resume(budget, RunStatus(RunState.INTERRUPTED), {C: 50 * USD}, ceilings)
    assert raised.budget.max_cost_nanos == 100 * USD
    assert raised.budget.binding[C] == "host"
    above = resolve_effective_budget(BudgetPolicy(max_cost_nanos=200 * USD))
    exhausted = RunStatus(RunState.INTERRUPTED, exhausted=frozenset({C}))
    kept = apply_resume(above, exhausted, {C: USD}, ceilings)
    assert kept.budget.max_cost_nanos == 200 * USD
    assert kept.status.exhausted == {C}  # not raised, so still exhausted


@pytest.mark.parametrize(
    ("state", "reason"), [(RunState.FAILED, "RUN_FAILED"), (RunState.CLOSED, "RUN_CLOSED")]
)
def test_final_runs_cannot_resume(state: RunState, reason: str) -> None:
    assert resume_refusal(RunStatus(state)) == {"reason": reason, "state": state.value}


def test_resume_refuses_negative_deltas() -> None:
    with pytest.raises(Invalid) as refused:
        apply_resume(EffectiveBudget(max_tokens=1), RunStatus(RunState.INTERRUPTED), {T: -1})
    assert refused.value.path == "delta.tokens"


def test_resume_approves_only_an_interrupted_run() -> None:
    assert resume_refusal(RunStatus(RunState.ACTIVE)) == {
        "reason": "RUN_NOT_INTERRUPTED",
        "state": "active",
    }
    assert resume_refusal(RunStatus(RunState.INTERRUPTED)) is None


def test_totals_past_int64_are_validation_failed_naming_the_amount() -> None:
    edge = 2**63 - 1
    interrupted = RunStatus(RunState.INTERRUPTED)
    assert apply_resume(EffectiveBudget(max_cost_nanos=edge - 5), interrupted, {C: 5}).budget
    with pytest.raises(Invalid) as resume:
        apply_resume(EffectiveBudget(max_cost_nanos=edge - 5), interrupted, {C: 6})
    assert resume.value.path == "delta.cost_nanos"
    near = {T: Balance(None, consumed=edge - 1, held=0)}
    assert settle_reservation(near, None, {T: 1})[T].consumed == edge
    with pytest.raises(Invalid) as consume:
        settle_reservation(near, None, {T: 2})
    assert consume.value.path == "usage.tokens"
    held = {RUN_BALANCE: {C: Balance(None, held=edge)}}
    with pytest.raises(Invalid) as reserve:
        decide_reserve(held, {C: 1})
    assert reserve.value.path == "estimate.cost_nanos"


# --- refusals and holds ----------------------------------------------------------------------


def test_closed_runs_refuse_reserve() -> None:
    assert state_refusal(RunStatus(RunState.CLOSED)) == {"reason": "RUN_CLOSED", "state": "closed"}
    assert state_refusal(RunStatus(RunState.FAILED)) == {"reason": "BUDGET_EXHAUSTED"}


def test_refusal_facts_are_rendered_amounts() -> None:
    assert exhausted_refusal(Breach(TC, 2, 2, 3)) == {
        "reason": "BUDGET_EXHAUSTED",
        "dimension": "toolCalls",
        "limit": "2",
        "observed": "3",
        "scope": "run",
        "scopeId": "",
    }
    assert held_refusal(Contention(C, USD, 200_000_000, 700_000_000, 300_000_000)) == {
        "reason": "BUDGET_HELD",
        "dimension": "cost",
        "limit": "1.0",
        "consumed": "0.2",
        "held": "0.7",
        "requested": "0.3",
        "scope": "run",
        "scopeId": "",
    }


def test_an_open_hold_past_its_expiry_has_stopped_counting() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert (
        effective_reservation_state(ReservationState.OPEN, now + timedelta(seconds=1), now)
        is ReservationState.OPEN
    )
    assert effective_reservation_state(ReservationState.OPEN, now, now) is ReservationState.EXPIRED
    assert (
        effective_reservation_state(ReservationState.RELEASED, now, now)
        is ReservationState.RELEASED
    )


# --- the correctness bar under random interleavings ------------------------------------------

_amounts = st.dictionaries(
    st.sampled_from([T, C, TC]), st.integers(min_value=0, max_value=40), max_size=3
)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), _amounts, st.sampled_from(list(ReserveMode))),
        st.tuples(st.just("consume"), _amounts, st.integers(min_value=-1, max_value=5)),
        st.tuples(st.just("release"), st.integers(min_value=0, max_value=5)),
        st.tuples(st.just("expire"), st.integers(min_value=0, max_value=5)),
    ),
    max_size=40,
)
_limit = st.one_of(st.none(), st.integers(min_value=0, max_value=100))


def _check_bar(
    balances: Mapping[BalanceRef, Mapping[Dimension, Balance]],
    excess: Mapping[BalanceRef, Mapping[Dimension, int]],
    open_reservations: list[Mapping[Dimension, int]],
) -> None:
    for ref, dims in balances.items():
        for d, b in dims.items():
            assert b.held == sum(h.get(d, 0) for h in open_reservations)
            if b.limit is not None:
                # consumed may pass the limit only through recorded usage beyond a hold.
                assert b.consumed + b.held <= b.limit + excess[ref][d]


@settings(max_examples=300)
@given(
    run_limits=st.tuples(_limit, _limit, _limit),
    pool_limits=st.tuples(_limit, _limit, _limit),
    on_exhaustion=st.sampled_from(list(OnExhaustion)),
    ops=_ops,
)
def test_granted_consumed_plus_held_never_exceeds_any_limit(
    run_limits: tuple[int | None, ...],
    pool_limits: tuple[int | None, ...],
    on_exhaustion: OnExhaustion,
    ops: list[tuple[object, ...]],
) -> None:
    budget = EffectiveBudget(
        max_tokens=run_limits[0],
        max_cost_nanos=run_limits[1],
        max_tool_calls=run_limits[2],
        on_exhaustion=on_exhaustion,
    )
    balances: dict[BalanceRef, Mapping[Dimension, Balance]] = {
        RUN_BALANCE: {d: Balance(budget.limit(d)) for d in Dimension},
        POOL: {
            d: Balance(limit) for d, limit in zip([T, C, TC, R], [*pool_limits, None], strict=True)
        },
    }
    excess = {ref: dict.fromkeys(Dimension, 0) for ref in balances}
    status, open_reservations = RunStatus(), []
    for op in ops:
        if op[0] == "reserve":
            estimate, mode = op[1], op[2]
            assert isinstance(estimate, dict)
            assert isinstance(mode, ReserveMode)
            if status.state is not RunState.ACTIVE:
                assert state_refusal(status) is not None
                continue
            decision = decide_reserve(balances, estimate, mode)
            if decision.breach is not None and decision.breach.balance is not RUN_BALANCE:
                continue  # a pool that cannot fit refuses; the run lives
            if decision.breach is not None:
                status = apply_reserve_breach(decision.breach, status, budget).status
                assert status.state is not RunState.ACTIVE
            elif decision.contention is None:
                balances = {
                    ref: apply_reservation(dims, decision.granted) for ref, dims in balances.items()
                }
                open_reservations.append(decision.granted)
                for dims in balances.values():
                    for d in decision.granted:
                        limit = dims[d].limit
                        assert limit is None or dims[d].consumed + dims[d].held <= limit
        elif op[0] == "consume":
            usage, index = op[1], op[2]
            assert isinstance(usage, dict)
            assert isinstance(index, int)
            reservation = (
                open_reservations.pop(index) if 0 <= index < len(open_reservations) else None
            )
            outcome = apply_consume(balances[RUN_BALANCE], reservation, usage, budget, status)
            status = outcome.status
            balances = {
                RUN_BALANCE: outcome.balances,
                POOL: settle_reservation(balances[POOL], reservation, usage),
            }
            for ref in balances:
                for d, used in usage.items():
                    excess[ref][d] += max(0, used - (reservation or {}).get(d, 0))
        else:  # release or expiry: the same arithmetic, the hold stops counting
            index = op[1]
            assert isinstance(index, int)
            if index >= len(open_reservations):
                continue
            reservation = open_reservations.pop(index)
            balances = {
                ref: settle_reservation(dims, reservation) for ref, dims in balances.items()
            }
        _check_bar(balances, excess, open_reservations)
