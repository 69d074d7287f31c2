"""The DomainErrors of budget refusals (reason, metadata, details), and that the reference
model (tests/support/oracle.py) reports exactly their reason and metadata as its facts."""

from __future__ import annotations

import pytest

from budget_service.domain.policy import Dimension, Scope
from budget_service.domain.refusals import (
    budget_exhausted_error,
    budget_held_error,
    reservation_settled_error,
    resume_error,
    run_state_error,
)
from budget_service.domain.run_state import (
    BalanceRef,
    Breach,
    Contention,
    ReservationState,
    RunState,
    RunStatus,
)
from servicekit.errors import BadRequestDetail, DomainError, ErrorKind, QuotaDetail, RetryDetail
from tests.support.oracle import exhausted_refusal, held_refusal, resume_refusal, state_refusal

USD = 10**9
T, C, TC = Dimension.TOKENS, Dimension.COST, Dimension.TOOL_CALLS
POOL = BalanceRef(Scope.PROJECT, "p1")


def _facts(error: DomainError) -> dict[str, str]:
    return {"reason": error.reason, **error.metadata}


def test_budget_exhausted_error_shape() -> None:
    error = budget_exhausted_error(Breach(TC, 2, 2, 3))
    assert (error.kind, error.reason) == (ErrorKind.EXHAUSTED, "BUDGET_EXHAUSTED")
    assert error.metadata == {
        "dimension": "toolCalls",
        "limit": "2",
        "observed": "3",
        "scope": "run",
        "scopeId": "",
    }
    assert isinstance(error.detail, QuotaDetail)
    assert budget_exhausted_error(None).metadata == {}
    pool = budget_exhausted_error(Breach(C, USD, USD, USD + 5, POOL))
    assert pool.detail == QuotaDetail("project:cost", "cost limit 1.0")


def test_budget_held_error_shape() -> None:
    error = budget_held_error(Contention(C, USD, 200_000_000, 700_000_000, 300_000_000), 0.5)
    assert (error.kind, error.reason) == (ErrorKind.EXHAUSTED, "BUDGET_HELD")
    assert error.metadata == {
        "dimension": "cost",
        "limit": "1.0",
        "consumed": "0.2",
        "held": "0.7",
        "requested": "0.3",
        "scope": "run",
        "scopeId": "",
    }
    assert error.detail == RetryDetail(0.5)


def test_error_metadata_is_lower_camel_strings() -> None:
    errors = [
        budget_exhausted_error(Breach(T, 1, 1, 2)),
        budget_held_error(Contention(T, 1, 0, 1, 1)),
    ]
    for error in errors:
        assert all(isinstance(v, str) for v in error.metadata.values())
        assert all(k[0].islower() and "_" not in k for k in error.metadata)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (RunStatus(RunState.CLOSED), run_state_error("RUN_CLOSED", RunState.CLOSED, "closed")),
        (
            RunStatus(RunState.INTERRUPTED),
            run_state_error("RUN_INTERRUPTED", RunState.INTERRUPTED, "interrupted"),
        ),
        (RunStatus(RunState.FAILED), budget_exhausted_error(None)),
        (
            RunStatus(RunState.FAILED, stopped_by=Breach(C, USD, USD, 1_020_000_000)),
            budget_exhausted_error(Breach(C, USD, USD, 1_020_000_000)),
        ),
    ],
)
def test_state_refusals_carry_the_service_metadata(status: RunStatus, error: DomainError) -> None:
    assert error.kind in (ErrorKind.PRECONDITION, ErrorKind.EXHAUSTED)
    assert state_refusal(status) == _facts(error)


def test_budget_refusals_carry_the_service_metadata() -> None:
    breach, contention = Breach(C, USD, USD, USD + 5, POOL), Contention(T, 10, 2, 7, 3)
    assert exhausted_refusal(breach) == _facts(budget_exhausted_error(breach))
    assert held_refusal(contention) == _facts(budget_held_error(contention))


@pytest.mark.parametrize(
    "state", [ReservationState.CONSUMED, ReservationState.RELEASED, ReservationState.EXPIRED]
)
def test_a_settled_hold_names_its_state(state: ReservationState) -> None:
    error = reservation_settled_error(state)
    assert (error.kind, error.reason) == (ErrorKind.PRECONDITION, "RESERVATION_SETTLED")
    assert error.metadata == {"state": state.value}


@pytest.mark.parametrize("state", [RunState.ACTIVE, RunState.FAILED, RunState.CLOSED])
def test_a_resume_the_engine_refuses_for_the_run_state_is_the_oracle_refusal(
    state: RunState,
) -> None:
    error = resume_error("refused", state.value, ())
    assert error.kind is ErrorKind.PRECONDITION
    assert {"reason": error.reason, **error.metadata} == resume_refusal(RunStatus(state))


def test_a_resume_delta_the_engine_refuses_names_the_request_fields() -> None:
    negative = resume_error("negative", "interrupted", ("cost", "retries"))
    assert (negative.kind, negative.reason) == (ErrorKind.INVALID, "VALIDATION_FAILED")
    assert isinstance(negative.detail, BadRequestDetail)
    assert [v.field for v in negative.detail.violations] == ["delta.cost_nanos", "delta.retries"]
    overflow = resume_error("overflow", "interrupted", ("tokens",))
    assert isinstance(overflow.detail, BadRequestDetail)
    assert [v.field for v in overflow.detail.violations] == ["delta.tokens"]
    assert "running total" in overflow.detail.violations[0].description
    with pytest.raises(ValueError, match="unknown resume outcome"):
        resume_error("done", "interrupted", ())
