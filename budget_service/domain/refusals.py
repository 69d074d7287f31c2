"""Budget refusals: the guards that refuse a call and the DomainErrors they raise (DESIGN 11)."""

from __future__ import annotations

from collections.abc import Callable

from budget_service.domain import events as ev
from budget_service.domain.policy import ModelVerdict, Scope
from budget_service.domain.run_state import (
    Breach,
    Contention,
    ReservationState,
    RunState,
    RunStatus,
)
from servicekit.errors import (
    DomainError,
    ErrorKind,
    PreconditionDetail,
    QuotaDetail,
    RetryDetail,
    not_found,
)


def breach_message(breach: Breach) -> str:
    """The `run.failed` and BUDGET_EXHAUSTED message: the dimension and amounts, no prices."""
    d = breach.dimension
    limit, observed = ev.render_amount(d, breach.limit), ev.render_amount(d, breach.observed)
    return f"budget exhausted: {d} limit {limit}, observed {observed}"


def ensure_can_reserve(status: RunStatus) -> None:
    """Reserve is refused unless the run is ACTIVE (Consume is always recorded)."""
    if status.state is RunState.FAILED:
        raise budget_exhausted_error(status.stopped_by)
    if status.state is RunState.INTERRUPTED:
        raise run_state_error("RUN_INTERRUPTED", status.state, "the run is interrupted: resume it")
    if status.state is RunState.CLOSED:
        raise run_state_error("RUN_CLOSED", status.state, "the run is closed")


# The budget refusals that advisory mode reports instead of enforcing (a run's state is enforced).
BUDGET_REASONS = frozenset({"BUDGET_MODEL_DENIED", "BUDGET_EXHAUSTED", "BUDGET_HELD"})


def reserve_refusal(
    status: RunStatus,
    verdict: ModelVerdict | None,
    decide: Callable[[], tuple[Breach | None, Contention | None]],
) -> str:
    """The reason a Reserve is refused ("" when granted), in the one precedence: the run's
    state, then the model policy (None: the call names no model), then a breach, then
    contention. Check reports it; Reserve refuses in this order and reports it in advisory
    mode. `decide` runs only when neither state nor model refuses (it may refuse the estimate)."""
    if status.state is not RunState.ACTIVE:
        try:
            ensure_can_reserve(status)
        except DomainError as refused:
            return refused.reason
    if verdict is not None and not verdict.allowed:
        return "BUDGET_MODEL_DENIED"
    breach, contention = decide()
    if breach is not None:
        return "BUDGET_EXHAUSTED"
    return "" if contention is None else "BUDGET_HELD"


def ensure_resumable(status: RunStatus) -> None:
    """ResumeRun approves the continuation of an INTERRUPTED run, nothing else: FAILED and
    CLOSED are final, and an ACTIVE run's limits are not raised by approval."""
    if status.state is RunState.CLOSED:
        raise run_state_error("RUN_CLOSED", status.state, "the run is closed")
    if status.state is RunState.FAILED:
        raise run_state_error("RUN_FAILED", status.state, "the run has failed and cannot resume")
    if status.state is not RunState.INTERRUPTED:
        message = "only an interrupted run can be resumed"
        raise run_state_error("RUN_NOT_INTERRUPTED", status.state, message)


def consume_settles_reservation(state: ReservationState) -> bool:
    """Whether a Consume naming this hold settles it. Released or expired holds no longer count,
    so the usage is recorded unreserved (billed usage is never lost); consumed ones refuse."""
    if state is ReservationState.CONSUMED:
        raise reservation_settled_error(state)
    return state is ReservationState.OPEN


def ensure_can_release(state: ReservationState) -> None:
    if state is not ReservationState.OPEN:
        raise reservation_settled_error(state)


def run_state_error(reason: str, state: RunState, message: str) -> DomainError:
    """RUN_INTERRUPTED, RUN_CLOSED (and RUN_FAILED, RUN_NOT_INTERRUPTED for ResumeRun):
    FAILED_PRECONDITION."""
    detail = PreconditionDetail("RUN_STATE", "run", f"the run is {state.value}")
    return DomainError(ErrorKind.PRECONDITION, reason, message, {"state": state.value}, detail)


def budget_exhausted_error(breach: Breach | None) -> DomainError:
    """BUDGET_EXHAUSTED with the breach that stopped the run, and a QuotaFailure detail."""
    if breach is None:
        return DomainError(ErrorKind.EXHAUSTED, "BUDGET_EXHAUSTED", "the run's budget is exhausted")
    d = breach.dimension
    limit, observed = ev.render_amount(d, breach.limit), ev.render_amount(d, breach.observed)
    metadata = {"dimension": d.value, "limit": limit, "observed": observed}
    detail = QuotaDetail(f"{breach.balance.scope.value}:{d.value}", f"{d} limit {limit}")
    return DomainError(
        ErrorKind.EXHAUSTED, "BUDGET_EXHAUSTED", breach_message(breach), metadata, detail
    )


def budget_held_error(contention: Contention, retry_after_seconds: float = 1.0) -> DomainError:
    """BUDGET_HELD: open holds are in the way; retry once they settle or expire."""
    c, d = contention, contention.dimension
    amounts = {"limit": c.limit, "consumed": c.consumed, "held": c.held, "requested": c.requested}
    metadata = {"dimension": d.value} | {k: ev.render_amount(d, v) for k, v in amounts.items()}
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


def model_denied_error(model: str, scope: Scope) -> DomainError:
    """BUDGET_MODEL_DENIED: refused before any spend."""
    return DomainError(
        ErrorKind.PRECONDITION,
        "BUDGET_MODEL_DENIED",
        f"model {model!r} is not allowed by the {scope.value} budget policy",
        metadata={"model": model, "scope": scope.value},
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
