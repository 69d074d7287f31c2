"""One refusal precedence for Reserve and Check: state, model policy, breach, contention."""

from __future__ import annotations

from budget_service.domain.policy import Dimension, ModelVerdict, Scope
from budget_service.domain.refusals import reserve_refusal
from budget_service.domain.run_state import Breach, Contention, RunState, RunStatus

BREACH = Breach(Dimension.TOKENS, limit=10, consumed=10, observed=11)
CONTENTION = Contention(Dimension.TOKENS, limit=10, consumed=5, held=5, requested=1)
DENIED = ModelVerdict(False, Scope.RUN)


def never() -> tuple[Breach | None, Contention | None]:
    raise AssertionError("the estimate is judged only once state and model allow the call")


def test_a_closed_run_refuses_reserve_before_anything_else() -> None:
    closed = RunStatus(state=RunState.CLOSED)
    assert reserve_refusal(closed, DENIED, never) == "RUN_CLOSED"
    assert reserve_refusal(RunStatus(state=RunState.INTERRUPTED), None, never) == "RUN_INTERRUPTED"
    assert reserve_refusal(RunStatus(state=RunState.FAILED), None, never) == "BUDGET_EXHAUSTED"


def test_the_model_policy_comes_before_the_estimate() -> None:
    assert reserve_refusal(RunStatus(), DENIED, never) == "BUDGET_MODEL_DENIED"


def test_a_breach_comes_before_contention_and_nothing_grants() -> None:
    active, allowed = RunStatus(), ModelVerdict(True)
    assert reserve_refusal(active, allowed, lambda: (BREACH, CONTENTION)) == "BUDGET_EXHAUSTED"
    assert reserve_refusal(active, allowed, lambda: (None, CONTENTION)) == "BUDGET_HELD"
    assert reserve_refusal(active, None, lambda: (None, None)) == ""
