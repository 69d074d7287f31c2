"""Budget refusals: the guards that refuse a call and the DomainErrors they raise (DESIGN 11)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from budget_service.domain import events as ev
from budget_service.domain.policy import MAX_TOTAL, Dimension, Scope, dimension_named
from budget_service.domain.run_state import (
    BalanceRef,
    Breach,
    Contention,
    ReservationState,
    RunState,
)
from servicekit.errors import (
    DomainError,
    ErrorKind,
    FieldViolation,
    PreconditionDetail,
    QuotaDetail,
    RetryDetail,
    not_found,
    validation_error,
)


def breach_message(breach: Breach) -> str:
    """The `run.failed` and BUDGET_EXHAUSTED message: the dimension and amounts, no prices."""
    d = breach.dimension
    limit, observed = ev.render_amount(d, breach.limit), ev.render_amount(d, breach.observed)
    return f"budget exhausted: {d} limit {limit}, observed {observed}"


def resume_error(outcome: str, state: str | None, dimensions: Sequence[str]) -> DomainError:
    """The DomainError of a ResumeRun the engine refused (budget.resume_run_v1). ResumeRun
    approves the continuation of an INTERRUPTED run, nothing else: FAILED and CLOSED are final,
    and an ACTIVE run's limits are not raised by approval (`state`). Then the delta: an amount
    is negative, or a raised limit would pass the bigint range (`dimensions`, JSON names)."""
    if outcome == "refused":
        run_state = RunState(str(state))
        if run_state is RunState.CLOSED:
            return run_state_error("RUN_CLOSED", run_state, "the run is closed")
        if run_state is RunState.FAILED:
            message = "the run has failed and cannot resume"
            return run_state_error("RUN_FAILED", run_state, message)
        message = "only an interrupted run can be resumed"
        return run_state_error("RUN_NOT_INTERRUPTED", run_state, message)
    if outcome == "negative":
        message = "must be at least 0"
    elif outcome == "overflow":
        message = f"takes a running total past {MAX_TOTAL}"
    else:
        raise ValueError(f"unknown resume outcome {outcome!r}")
    return validation_error(
        [FieldViolation(f"delta.{Dimension(d).field_name}", message) for d in dimensions]
    )


def run_state_error(reason: str, state: RunState, message: str) -> DomainError:
    """RUN_INTERRUPTED, RUN_CLOSED (and RUN_FAILED, RUN_NOT_INTERRUPTED for ResumeRun):
    FAILED_PRECONDITION."""
    detail = PreconditionDetail("RUN_STATE", "run", f"the run is {state.value}")
    return DomainError(ErrorKind.PRECONDITION, reason, message, {"state": state.value}, detail)


def budget_exhausted_error(
    breach: Breach | None, retry_after_seconds: float | None = None
) -> DomainError:
    """BUDGET_EXHAUSTED naming the balance (the run, or a pool's scope and id) and the breach,
    with a QuotaFailure detail, and RetryInfo until a windowed pool's next window."""
    if breach is None:
        return DomainError(ErrorKind.EXHAUSTED, "BUDGET_EXHAUSTED", "the run's budget is exhausted")
    d, ref = breach.dimension, breach.balance
    limit, observed = ev.render_amount(d, breach.limit), ev.render_amount(d, breach.observed)
    metadata = {
        "dimension": d.value,
        "limit": limit,
        "observed": observed,
        "scope": ref.scope.value,
        "scopeId": ref.scope_id,
    }
    detail = QuotaDetail(f"{ref.scope.value}:{d.value}", f"{d} limit {limit}")
    more = () if retry_after_seconds is None else (RetryDetail(retry_after_seconds),)
    message = breach_message(breach)
    if ref.scope is not Scope.RUN:
        message = f"the {ref.scope.value} {ref.scope_id!r} pool is spent: {d} limit {limit}"
    return DomainError(ErrorKind.EXHAUSTED, "BUDGET_EXHAUSTED", message, metadata, detail, more)


def budget_held_error(contention: Contention, retry_after_seconds: float = 1.0) -> DomainError:
    """BUDGET_HELD: open holds are in the way; retry once they settle or expire."""
    c, d = contention, contention.dimension
    amounts = {"limit": c.limit, "consumed": c.consumed, "held": c.held, "requested": c.requested}
    metadata = {"dimension": d.value} | {k: ev.render_amount(d, v) for k, v in amounts.items()}
    metadata |= {"scope": c.balance.scope.value, "scopeId": c.balance.scope_id}
    message = f"{d} is held by open reservations; retry later"
    return DomainError(
        ErrorKind.EXHAUSTED, "BUDGET_HELD", message, metadata, RetryDetail(retry_after_seconds)
    )


def reservation_settled_error(state: ReservationState) -> DomainError:
    """RESERVATION_SETTLED: the hold already ended (consumed, released or expired)."""
    message = f"the reservation is already {state.value}"
    return DomainError(
        ErrorKind.PRECONDITION, "RESERVATION_SETTLED", message, {"state": state.value}
    )


def model_denied_error(model: str, scope: Scope, scope_id: str = "") -> DomainError:
    """BUDGET_MODEL_DENIED: refused before any spend, naming the scope whose lists refused."""
    return DomainError(
        ErrorKind.PRECONDITION,
        "BUDGET_MODEL_DENIED",
        f"model {model!r} is not allowed by the {scope.value} budget policy",
        metadata={"model": model, "scope": scope.value, "scopeId": scope_id},
        detail=PreconditionDetail(
            "BUDGET_MODEL_POLICY", f"model:{model}", f"denied by the {scope.value} model lists"
        ),
    )


def run_not_found() -> DomainError:
    """Another tenant's run is indistinguishable from one that does not exist."""
    return not_found("RUN_NOT_FOUND", "no such run")


def reservation_not_found() -> DomainError:
    return not_found("RESERVATION_NOT_FOUND", "no such reservation on this run")


def scope_budget_not_found() -> DomainError:
    return not_found("SCOPE_BUDGET_NOT_FOUND", "no such scope budget")


def run_exists(run_id: str) -> DomainError:
    """OpenRun with an existing run_id but a different policy or owners."""
    return DomainError(
        ErrorKind.EXISTS,
        "RUN_EXISTS",
        "a run with this run_id exists with a different policy or owners",
        metadata={"runId": run_id},
    )


# How long a caller refused with BUDGET_HELD should wait before retrying the same request_id.
HELD_RETRY_SECONDS = 0.5

_STATE_MESSAGES = {
    "RUN_INTERRUPTED": "the run is interrupted: resume it",
    "RUN_CLOSED": "the run is closed",
}


def refusal_error(facts: Mapping[str, Any]) -> DomainError:
    """The DomainError of a refusal the ledger decided (budget.decide_v2), from its facts.

    Only the wording and error details live here; which refusal applies is the database's."""
    reason = str(facts["reason"])
    if reason == "BUDGET_EXHAUSTED":
        breach = None
        if facts.get("dimension") is not None:
            ref = BalanceRef(Scope(facts["breach_scope"]), facts["breach_scope_id"])
            breach = Breach(
                dimension_named(facts["dimension"]),
                int(facts["limit"]),
                int(facts["consumed"]),
                int(facts["observed"]),
                ref,
            )
        retry = facts.get("retry_after_seconds")
        return budget_exhausted_error(breach, None if retry is None else float(retry))
    if reason in _STATE_MESSAGES:
        return run_state_error(reason, RunState(facts["state"]), _STATE_MESSAGES[reason])
    if reason == "BUDGET_MODEL_DENIED":
        return model_denied_error(
            str(facts["model"]), Scope(facts["scope"]), str(facts.get("scope_id", ""))
        )
    if reason == "BUDGET_HELD":
        contention = Contention(
            dimension_named(facts["dimension"]),
            int(facts["limit"]),
            int(facts["consumed"]),
            int(facts["held"]),
            int(facts["requested"]),
            BalanceRef(Scope(facts["scope"]), str(facts.get("scope_id", ""))),
        )
        return budget_held_error(contention, HELD_RETRY_SECONDS)
    if reason == "RESERVATION_NOT_FOUND":
        return reservation_not_found()
    if reason == "RESERVATION_SETTLED":
        return reservation_settled_error(ReservationState(facts["state"]))
    if reason == "RUN_NOT_FOUND":
        return run_not_found()
    if reason == "VALIDATION_FAILED":
        field = str(facts["field"])
        return validation_error([FieldViolation(field, f"takes a running total past {MAX_TOTAL}")])
    raise ValueError(f"unknown refusal reason {reason!r}")
