"""Balance bookkeeping of the lifecycle calls that stay in Python: holds released by CloseRun or
expired by the sweeper, and ResumeRun's raised limits.

Reserve, Consume, Release and Check are decided by the ledger (budget.decide_v1, migration
0006); the Python model of those rules is the test oracle (tests/support/oracle.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from budget_service.domain import events as ev
from budget_service.domain.policy import HOST, MAX_TOTAL, Dimension, EffectiveBudget, HostCeilings
from budget_service.domain.refusals import ensure_resumable
from budget_service.domain.run_state import Amounts, Balance, RunState, RunStatus
from servicekit.errors import FieldViolation, validation_error


@dataclass(frozen=True)
class Outcome:
    """The new run status and the events to append, in order, in the same transaction."""

    status: RunStatus
    events: tuple[ev.BudgetEvent, ...] = ()


@dataclass(frozen=True)
class ResumeOutcome(Outcome):
    budget: EffectiveBudget = field(default_factory=EffectiveBudget)


def ensure_total_fits(total: int, dimension: Dimension, request_field: str) -> None:
    """A running total past the bigint range can only come from an absurd amount: the call is
    refused as invalid (VALIDATION_FAILED naming the amount) before anything is written."""
    if total > MAX_TOTAL:
        path = f"{request_field}.{dimension.field_name}"
        raise validation_error([FieldViolation(path, f"takes a running total past {MAX_TOTAL}")])


def _get(balances: Mapping[Dimension, Balance], dimension: Dimension) -> Balance:
    # A dimension a balance does not mention is unbounded there; holds still count on it.
    return balances.get(dimension, Balance(None))


def _release(dimension: Dimension, balance: Balance, reservation: int) -> Balance:
    if reservation > balance.held:
        # More than is held means a hold is being settled twice: a bug, never a client error.
        raise ValueError(f"{dimension}: settling {reservation} but only {balance.held} is held")
    return replace(balance, held=balance.held - reservation)


def settle_reservation(
    balances: Mapping[Dimension, Balance], reservation: Amounts
) -> dict[Dimension, Balance]:
    """A hold released (CloseRun) or expired (the sweeper) stops counting on one balance."""
    return {d: _release(d, _get(balances, d), reservation.get(d, 0)) for d in Dimension}


def apply_resume(
    budget: EffectiveBudget, status: RunStatus, delta: Amounts, ceilings: HostCeilings | None = None
) -> ResumeOutcome:
    """ResumeRun of an INTERRUPTED run: raise bounded limits additively (never past a host
    ceiling, never down, never past the bigint range), back to ACTIVE, and record a second
    budget.reserved with the result. Raised dimensions get fresh once-only flags: the new limit
    is a new budget to cross."""
    ensure_resumable(status)
    bad = [
        FieldViolation(f"delta.{d.field_name}", "must be at least 0")
        for d, v in delta.items()
        if v < 0
    ]
    if bad:
        raise validation_error(bad)
    ceilings, binding = ceilings or HostCeilings(), dict(budget.binding)
    limits: dict[Dimension, int | None] = {}
    raised: set[Dimension] = set()
    for d in Dimension:
        old, extra, ceiling = budget.limit(d), delta.get(d, 0), ceilings.limit(d)
        new = old
        if old is not None and extra > 0:
            new = old + extra
            if ceiling is not None and ceiling < new:
                new, binding[d] = max(ceiling, old), HOST
            ensure_total_fits(new, d, "delta")
            if new > old:
                raised.add(d)
        limits[d] = new
    new_budget = replace(budget.with_limits(limits), binding=binding)
    new_status = RunStatus(
        RunState.ACTIVE,
        status.crossed - raised,
        status.exhausted - raised,
        status.breached - raised,
    )
    return ResumeOutcome(new_status, (ev.BudgetReserved(new_budget, new_budget.scope),), new_budget)
