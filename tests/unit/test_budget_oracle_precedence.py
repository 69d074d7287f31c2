"""The reference model's one refusal precedence for Reserve and Check: state, model policy,
breach, contention (tests/support/oracle.py)."""

from __future__ import annotations

import pytest

from budget_service.domain.policy import Dimension, ModelVerdict, Scope
from budget_service.domain.run_state import Breach, Contention, RunState, RunStatus
from tests.support.oracle import reserve_refusal

BREACH = Breach(Dimension.TOKENS, limit=10, consumed=10, observed=11)
CONTENTION = Contention(Dimension.TOKENS, limit=10, consumed=5, held=5, requested=1)
DENIED = ModelVerdict(False, Scope.RUN)


def test_a_closed_run_refuses_reserve_before_anything_else() -> None:
    closed = RunStatus(state=RunState.CLOSED)
    assert reserve_refusal(closed, DENIED, None) == "RUN_CLOSED"
    assert reserve_refusal(RunStatus(state=RunState.INTERRUPTED), None, None) == "RUN_INTERRUPTED"
    assert reserve_refusal(RunStatus(state=RunState.FAILED), None, None) == "BUDGET_EXHAUSTED"


def test_the_model_policy_comes_before_the_estimate() -> None:
    assert reserve_refusal(RunStatus(), DENIED, None) == "BUDGET_MODEL_DENIED"


def test_the_estimate_is_judged_only_once_state_and_model_allow_the_call() -> None:
    with pytest.raises(AssertionError):
        reserve_refusal(RunStatus(), ModelVerdict(True), None)


def test_a_breach_comes_before_contention_and_nothing_grants() -> None:
    active, allowed = RunStatus(), ModelVerdict(True)
    assert reserve_refusal(active, allowed, (BREACH, CONTENTION)) == "BUDGET_EXHAUSTED"
    assert reserve_refusal(active, allowed, (None, CONTENTION)) == "BUDGET_HELD"
    assert reserve_refusal(active, None, (None, None)) == ""
