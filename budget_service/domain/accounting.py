"""Reservation accounting: reserve, consume, release/expiry, exhaustion, breach and resume rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from budget_service.domain import events as ev
from budget_service.domain.policy import (
    HOST,
    MAX_TOTAL,
    Dimension,
    EffectiveBudget,
    Enforcement,
    HostCeilings,
    OnExhaustion,
)
from budget_service.domain.refusals import breach_message, ensure_resumable
from budget_service.domain.run_state import (
    Amounts,
    Balance,
    Balances,
    Breach,
    Contention,
    ReservationState,
    ReserveMode,
    RunState,
    RunStatus,
)
from servicekit.errors import FieldViolation, validation_error

# UP_TO may shrink these to what is left; a tool call or a retry is indivisible.
PARTIAL_DIMENSIONS = frozenset({Dimension.TOKENS, Dimension.COST})


@dataclass(frozen=True)
class ReserveDecision:
    """`granted` is what to hold on every balance; empty when refused (hard mode only)."""

    granted: Mapping[Dimension, int]
    breach: Breach | None = None
    contention: Contention | None = None
    enforcement: Enforcement = Enforcement.HARD

    @property
    def would_refuse(self) -> bool:
        return self.breach is not None or self.contention is not None

    @property
    def refused(self) -> bool:
        return self.would_refuse and self.enforcement is Enforcement.HARD


@dataclass(frozen=True)
class Outcome:
    """The new run status and the events to append, in order, in the same transaction."""

    status: RunStatus
    events: tuple[ev.BudgetEvent, ...] = ()


@dataclass(frozen=True)
class ConsumeOutcome(Outcome):
    balances: Mapping[Dimension, Balance] = field(default_factory=dict)
    overrun: Mapping[Dimension, int] = field(default_factory=dict)  # usage beyond the hold


@dataclass(frozen=True)
class ResumeOutcome(Outcome):
    budget: EffectiveBudget = field(default_factory=EffectiveBudget)


def ensure_total_fits(total: int, dimension: Dimension, request_field: str) -> None:
    """A running total past the bigint range can only come from an absurd amount: the call is
    refused as invalid (VALIDATION_FAILED naming the amount) before anything is written."""
    if total > MAX_TOTAL:
        path = f"{request_field}.{dimension.field_name}"
        raise validation_error([FieldViolation(path, f"takes a running total past {MAX_TOTAL}")])


def threshold_reached(consumed: int, limit: int, percent: int) -> bool:
    """consumed >= percent% of limit in exact integers; nothing consumed never crosses, so a
    0% threshold fires on the first real consumption."""
    return consumed > 0 and consumed * 100 >= limit * percent


def _fit(balance: Balance, dimension: Dimension, amount: int, mode: ReserveMode) -> str | None:
    if balance.limit is None:
        return None
    # UP_TO asks for "at least one unit, at most the estimate": only a spent balance is a
    # breach, and only a balance fully taken by holds is contention.
    need = 1 if mode is ReserveMode.UP_TO and dimension in PARTIAL_DIMENSIONS else amount
    if balance.consumed + need > balance.limit:
        return "breach"
    if balance.consumed + balance.held + need > balance.limit:
        return "contention"
    return None


def decide_reserve(
    balances: Balances,
    estimate: Amounts,
    mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
    enforcement: Enforcement = Enforcement.HARD,
) -> ReserveDecision:
    """Judge an estimate against the run and every pool, all or nothing across balances.

    Balances in canonical order (run first), dimensions in Dimension order; a breach anywhere
    outranks any contention. Zero amounts are not requests and are not checked.
    """
    requested = {d: estimate[d] for d in Dimension if estimate.get(d, 0) > 0}
    ordered = sorted(balances.items(), key=lambda item: item[0].sort_key)
    breach: Breach | None = None
    contention: Contention | None = None
    for ref, dims in ordered:
        for d, amount in requested.items():
            b = _get(dims, d)
            if b.limit is None:  # a bounded balance never holds past its limit
                ensure_total_fits(b.held + amount, d, "estimate")
            verdict, limit = _fit(b, d, amount, mode), b.limit or 0
            if verdict == "breach" and breach is None:
                breach = Breach(d, limit, b.consumed, b.consumed + amount, ref)
            elif verdict == "contention" and contention is None:
                contention = Contention(d, limit, b.consumed, b.held, amount, ref)
    contention = None if breach is not None else contention
    if enforcement is Enforcement.ADVISORY:
        # Shadow mode changes nothing for the caller: the full estimate, whatever would happen.
        return ReserveDecision(requested, breach, contention, enforcement)
    if breach is not None or contention is not None:
        return ReserveDecision({}, breach, contention, enforcement)
    granted = dict(requested)
    if mode is ReserveMode.UP_TO:
        for d in PARTIAL_DIMENSIONS & granted.keys():
            left = [r for _, dims in ordered if (r := _get(dims, d).remaining) is not None]
            granted[d] = min([granted[d], *left])
    return ReserveDecision(granted, enforcement=enforcement)


def _get(balances: Mapping[Dimension, Balance], dimension: Dimension) -> Balance:
    # A dimension a balance does not mention is unbounded there; holds still count on it.
    return balances.get(dimension, Balance(None))


def _settle(dimension: Dimension, balance: Balance, reservation: int, used: int) -> Balance:
    if reservation > balance.held:
        # More than is held means a hold is being settled twice: a bug, never a client error.
        raise ValueError(f"{dimension}: settling {reservation} but only {balance.held} is held")
    ensure_total_fits(balance.consumed + used, dimension, "usage")
    return replace(balance, consumed=balance.consumed + used, held=balance.held - reservation)


def apply_reservation(
    balances: Mapping[Dimension, Balance], granted: Amounts
) -> dict[Dimension, Balance]:
    """A grant starts counting on one balance (apply it to the run and every pool)."""
    return {d: replace(b := _get(balances, d), held=b.held + granted.get(d, 0)) for d in Dimension}


def settle_reservation(
    balances: Mapping[Dimension, Balance], reservation: Amounts | None, usage: Amounts | None = None
) -> dict[Dimension, Balance]:
    """Consume (usage recorded, hold settled), release and expiry (no usage) on one balance.

    The run's side of a Consume goes through `apply_consume`, which also derives the events.
    """
    reservation, usage = reservation or {}, usage or {}
    return {
        d: _settle(d, _get(balances, d), reservation.get(d, 0), usage.get(d, 0)) for d in Dimension
    }


def _stop(status: RunStatus, breach: Breach, on_exhaustion: OnExhaustion) -> Outcome:
    """The hard-mode consequence of a breach on an active run."""
    if on_exhaustion is OnExhaustion.INTERRUPT:
        return Outcome(replace(status, state=RunState.INTERRUPTED, stopped_by=breach))
    failed = replace(status, state=RunState.FAILED, stopped_by=breach)
    return Outcome(failed, (ev.RunFailed(breach_message(breach)),))


def apply_reserve_breach(
    breach: Breach,
    status: RunStatus,
    budget: EffectiveBudget,
    enforcement: Enforcement = Enforcement.HARD,
) -> Outcome:
    """budget.exhausted (if not yet), cap.breached, then run.failed or INTERRUPTED (hard mode).

    A pool breach counts like the run's own: the run cannot go on within its means. Advisory
    mode emits cap.breached once per dimension and never changes the state.
    """
    d, hard = breach.dimension, enforcement is Enforcement.HARD
    events: list[ev.BudgetEvent] = []
    if d not in status.exhausted:
        events.append(ev.BudgetExhausted(d, breach.consumed, breach.limit))
    if hard or d not in status.breached:
        events.append(ev.CapBreached(d, breach.limit, breach.observed))
    status = replace(status, exhausted=status.exhausted | {d}, breached=status.breached | {d})
    if hard and status.state is RunState.ACTIVE:
        stop = _stop(status, breach, budget.on_exhaustion)
        return Outcome(stop.status, (*events, *stop.events))
    return Outcome(status, tuple(events))


def apply_consume(
    balances: Mapping[Dimension, Balance],
    reservation: Amounts | None,
    usage: Amounts,
    budget: EffectiveBudget,
    status: RunStatus,
    enforcement: Enforcement = Enforcement.HARD,
) -> ConsumeOutcome:
    """Record actual usage on the run; never refused, since the provider already billed it.

    Per touched (usage > 0) bounded dimension in order: budget.consumed, threshold.crossed (once),
    budget.exhausted (once), cap.breached if consumed > limit on an ACTIVE run; then a single
    run.failed or INTERRUPTED in hard mode. Pools take the same usage through `settle_reservation`.
    """
    crossed, exhausted, breached = set(status.crossed), set(status.exhausted), set(status.breached)
    hard, percent = enforcement is Enforcement.HARD, budget.threshold_percent
    events: list[ev.BudgetEvent] = []
    settled = settle_reservation(balances, reservation, usage)
    overrun = {
        d: u - (reservation or {}).get(d, 0) for d, u in usage.items() if reservation is not None
    }
    first_breach: Breach | None = None
    for d, after in settled.items():
        limit, consumed = after.limit, after.consumed
        if usage.get(d, 0) == 0 or limit is None:
            continue
        events.append(ev.BudgetConsumed(d, consumed, limit, max(0, limit - consumed)))
        if d not in crossed and threshold_reached(consumed, limit, percent):
            crossed.add(d)
            events.append(ev.ThresholdCrossed(d, consumed, limit, percent))
        if d not in exhausted and consumed >= limit:
            exhausted.add(d)
            events.append(ev.BudgetExhausted(d, consumed, limit))
        # Exactly spent is exhausted, not breached. A stopped or closed run already had its
        # breach: later usage is recorded but does not breach again.
        if consumed > limit and status.state is RunState.ACTIVE:
            if hard or d not in breached:
                breached.add(d)
                events.append(ev.CapBreached(d, limit, consumed))
            first_breach = first_breach or Breach(d, limit, consumed, consumed)
    new_status = replace(
        status,
        crossed=frozenset(crossed),
        exhausted=frozenset(exhausted),
        breached=frozenset(breached),
    )
    if hard and first_breach is not None:
        stop = _stop(new_status, first_breach, budget.on_exhaustion)
        new_status, events = stop.status, [*events, *stop.events]
    positive = {d: n for d, n in overrun.items() if n > 0}
    return ConsumeOutcome(new_status, tuple(events), settled, positive)


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


def effective_reservation_state(
    state: ReservationState, expires_at: datetime, now: datetime
) -> ReservationState:
    """An open hold past its expiry has already stopped counting, before the sweeper marks it."""
    return (
        ReservationState.EXPIRED if state is ReservationState.OPEN and now >= expires_at else state
    )
