"""The reference model of one tenant's budget state: the rules of Reserve, Consume, Release,
expiry, Check, Resume and Close in plain Python, with every row they write kept in memory.

Production decides in the database (budget.decide_v1, docs in /work/briefs/engine.md and
DESIGN 5); this module is what the property tests compare it with, reply by reply and row by
row (tests/integration/test_budget_oracle_differential.py). It keeps its own copy of every
decision rule (the reserve decision, consume accounting, breaches, settling, thresholds,
resume, the refusal precedence), ported from the Python path they replaced; it imports from
budget_service only data types, event payload rendering, policy resolution and the stored
reply encoders, so a reply here is byte for byte what the service stores.

Time is an input: every call takes the database clock `now` it is judged at; a hold is
overdue once `expires_at <= now`. Refusals are `{"reason": ..., facts}` with the facts the
service puts in the error's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from budget_service.domain import events as ev
from budget_service.domain.commands import ConsumeResult, ReserveResult
from budget_service.domain.policy import (
    HOST,
    MAX_TOTAL,
    AnyDimension,
    BudgetPolicy,
    Dimension,
    EffectiveBudget,
    Enforcement,
    HostCeilings,
    ModelVerdict,
    OnExhaustion,
    PoolDimension,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
    model_verdict,
    resolve_effective_budget,
)
from budget_service.domain.records import (
    DimensionStatus,
    PoolKey,
    ReservationRecord,
    RunRecord,
    pool_statuses,
    run_statuses,
)
from budget_service.domain.run_state import (
    RUN_BALANCE,
    Amounts,
    Balance,
    BalanceRef,
    Breach,
    Contention,
    ReservationState,
    ReserveMode,
    RunOutcome,
    RunState,
    RunStatus,
)
from tests.support import stored_reply_encoders as encoders
from tests.support.windows import window_end, window_start

DIMENSIONS = tuple(Dimension)
# A pool's own dimension: a Reserve or Check naming a model asks for one model call, which
# every pool it draws on holds (and judges when it bounds them); a run never counts them.
MODEL_CALLS = PoolDimension.MODEL_CALLS
ALL_DIMENSIONS: tuple[AnyDimension, ...] = (*DIMENSIONS, MODEL_CALLS)
Quad = tuple[int, int, int, int]
ZERO4: Quad = (0, 0, 0, 0)
# UP_TO may shrink these to what is left; a tool call or a retry is indivisible.
PARTIAL_DIMENSIONS = frozenset({Dimension.TOKENS, Dimension.COST})
# The budget refusals that advisory mode reports instead of enforcing.
BUDGET_REASONS = frozenset({"BUDGET_MODEL_DENIED", "BUDGET_EXHAUSTED", "BUDGET_HELD"})
Refusal = dict[str, str]
# Balances and amounts keyed by the four dimensions, and on pools by MODEL_CALLS too (Any keys:
# a Mapping is invariant in its key type, and the rules take either).
Judged = Mapping[BalanceRef, Mapping[Any, Balance]]
Asked = Mapping[Any, int]


class Invalid(Exception):
    """VALIDATION_FAILED naming the amount: a running total past the bigint range, or a
    negative resume delta."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def quad(values: Mapping[Dimension, int] | None) -> Quad:
    values = values or {}
    t, c, tc, r = (int(values.get(d, 0)) for d in DIMENSIONS)
    return (t, c, tc, r)


def amounts(values: Mapping[Dimension, int] | Sequence[int] | None = None) -> dict[Dimension, int]:
    """All four dimensions, missing ones zero (a 4-sequence is in Dimension order)."""
    if values is None:
        return dict.fromkeys(DIMENSIONS, 0)
    if isinstance(values, Mapping):
        return {d: int(values.get(d, 0)) for d in DIMENSIONS}
    return dict(zip(DIMENSIONS, (int(v) for v in values), strict=True))


def negated(values: Mapping[Dimension, int] | None) -> dict[Dimension, int]:
    return {d: -v for d, v in amounts(values).items()}


# --- the decision rules -------------------------------------------------------------------


def ensure_total_fits(total: int, dimension: AnyDimension, request_field: str) -> None:
    if total > MAX_TOTAL:
        name = dimension.field_name if isinstance(dimension, Dimension) else "model_calls"
        raise Invalid(f"{request_field}.{name}")


def threshold_reached(consumed: int, limit: int, percent: int) -> bool:
    """consumed >= percent% of limit in exact integers; nothing consumed never crosses."""
    return consumed > 0 and consumed * 100 >= limit * percent


@dataclass(frozen=True)
class ReserveDecision:
    """`granted` is what to hold on every balance; empty when refused (hard mode only)."""

    granted: Asked
    breach: Breach | None = None
    contention: Contention | None = None
    enforcement: Enforcement = Enforcement.HARD

    @property
    def would_refuse(self) -> bool:
        return self.breach is not None or self.contention is not None

    @property
    def refused(self) -> bool:
        return self.would_refuse and self.enforcement is Enforcement.HARD


def _get(balances: Mapping[Any, Balance], dimension: AnyDimension) -> Balance:
    # A dimension a balance does not mention is unbounded there; holds still count on it.
    return balances.get(dimension, Balance(None))


def _fit(balance: Balance, dimension: AnyDimension, amount: int, mode: ReserveMode) -> str | None:
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
    balances: Judged,
    estimate: Asked,
    mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
    enforcement: Enforcement = Enforcement.HARD,
) -> ReserveDecision:
    """Judge an estimate against the run and every pool, all or nothing across balances.

    Balances in canonical order (run first), dimensions in Dimension order; the first breach
    anywhere outranks any contention. Zero amounts are not requests and are not checked.
    Advisory mode grants the full estimate and reports what hard mode would have refused.
    """
    requested = {d: estimate[d] for d in ALL_DIMENSIONS if estimate.get(d, 0) > 0}
    ordered = sorted(balances.items(), key=lambda item: item[0].sort_key)
    breach: Breach | None = None
    contention: Contention | None = None
    for ref, dims in ordered:
        for d, amount in requested.items():
            if d is MODEL_CALLS and ref == RUN_BALANCE:
                continue  # model calls are a pool's dimension only
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
        return ReserveDecision(requested, breach, contention, enforcement)
    if breach is not None or contention is not None:
        return ReserveDecision({}, breach, contention, enforcement)
    granted = dict(requested)
    if mode is ReserveMode.UP_TO:
        for d in PARTIAL_DIMENSIONS & granted.keys():
            left = [r for _, dims in ordered if (r := _get(dims, d).remaining) is not None]
            granted[d] = min([granted[d], *left])
    return ReserveDecision(granted, enforcement=enforcement)


def _settle(dimension: Dimension, balance: Balance, reservation: int, used: int) -> Balance:
    if reservation > balance.held:
        # More than is held means a hold is being settled twice: a bug, never a client error.
        raise ValueError(f"{dimension}: settling {reservation} but only {balance.held} is held")
    ensure_total_fits(balance.consumed + used, dimension, "usage")
    return replace(balance, consumed=balance.consumed + used, held=balance.held - reservation)


def apply_reservation(
    balances: Mapping[Dimension, Balance], granted: Amounts
) -> dict[Dimension, Balance]:
    """A grant starts counting on one balance (the run and every pool)."""
    return {d: replace(b := _get(balances, d), held=b.held + granted.get(d, 0)) for d in DIMENSIONS}


def settle_reservation(
    balances: Mapping[Dimension, Balance], reservation: Amounts | None, usage: Amounts | None = None
) -> dict[Dimension, Balance]:
    """Consume (usage recorded, hold settled), release and expiry (no usage) on one balance."""
    reservation, usage = reservation or {}, usage or {}
    return {
        d: _settle(d, _get(balances, d), reservation.get(d, 0), usage.get(d, 0)) for d in DIMENSIONS
    }


@dataclass(frozen=True)
class Outcome:
    """The new run status and the events to append, in order."""

    status: RunStatus
    events: tuple[ev.BudgetEvent, ...] = ()


@dataclass(frozen=True)
class ConsumeOutcome(Outcome):
    balances: Mapping[Dimension, Balance] = field(default_factory=dict)
    overrun: Mapping[Dimension, int] = field(default_factory=dict)  # usage beyond the hold


@dataclass(frozen=True)
class ResumeOutcome(Outcome):
    budget: EffectiveBudget = field(default_factory=EffectiveBudget)


def breach_message(breach: Breach) -> str:
    """The `run.failed` and BUDGET_EXHAUSTED message: the dimension and amounts."""
    d = breach.dimension
    limit, observed = ev.render_amount(d, breach.limit), ev.render_amount(d, breach.observed)
    return f"budget exhausted: {d} limit {limit}, observed {observed}"


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
    """A hard breach of the run's own budget: budget.exhausted (if not yet), cap.breached,
    then run.failed or INTERRUPTED. (A pool that cannot fit refuses without touching the run,
    and advisory mode emits nothing for a would-be refusal: see BudgetOracle._reserve.)"""
    d, hard = breach.dimension, enforcement is Enforcement.HARD
    assert hard, "advisory mode emits nothing for a would-be refusal"
    assert breach.balance.scope is Scope.RUN, "a pool that cannot fit refuses the call only"
    assert isinstance(d, Dimension), "a run never bounds model calls"
    events: list[ev.BudgetEvent] = []
    if d not in status.exhausted:
        events.append(ev.BudgetExhausted(d, breach.consumed, breach.limit))
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
    run.failed or INTERRUPTED in hard mode.
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
        # Exactly spent is exhausted, not breached; a stopped or closed run had its breach.
        if consumed > limit and status.state is RunState.ACTIVE:
            if hard:  # advisory mode: events only, never cap.breached (RFC 0084 section E)
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


def resume_refusal(status: RunStatus) -> Refusal | None:
    """ResumeRun approves the continuation of an INTERRUPTED run, nothing else."""
    if status.state is RunState.CLOSED:
        return {"reason": "RUN_CLOSED", "state": status.state.value}
    if status.state is RunState.FAILED:
        return {"reason": "RUN_FAILED", "state": status.state.value}
    if status.state is not RunState.INTERRUPTED:
        return {"reason": "RUN_NOT_INTERRUPTED", "state": status.state.value}
    return None


def apply_resume(
    budget: EffectiveBudget, status: RunStatus, delta: Amounts, ceilings: HostCeilings | None = None
) -> ResumeOutcome:
    """Resume of an INTERRUPTED run (the caller checked `resume_refusal`): raise bounded limits
    additively (never past a host ceiling, never down, never past the bigint range), back to
    ACTIVE, a second budget.reserved; raised dimensions get fresh once-only flags."""
    negative = [d for d in DIMENSIONS if delta.get(d, 0) < 0]
    if negative:
        raise Invalid(f"delta.{negative[0].field_name}")
    ceilings, binding = ceilings or HostCeilings(), dict(budget.binding)
    limits: dict[Dimension, int | None] = {}
    raised: set[Dimension] = set()
    for d in DIMENSIONS:
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
    """An open hold past its expiry has already stopped counting, before it is marked."""
    return (
        ReservationState.EXPIRED if state is ReservationState.OPEN and now >= expires_at else state
    )


# --- refusals: the reason and the facts the service reports -------------------------------


def exhausted_refusal(breach: Breach | None) -> Refusal:
    if breach is None:
        return {"reason": "BUDGET_EXHAUSTED"}
    d = breach.dimension
    return {
        "reason": "BUDGET_EXHAUSTED",
        "dimension": d.value,
        "limit": ev.render_amount(d, breach.limit),
        "observed": ev.render_amount(d, breach.observed),
        "scope": breach.balance.scope.value,
        "scopeId": breach.balance.scope_id,
    }


def held_refusal(contention: Contention) -> Refusal:
    c, d = contention, contention.dimension
    numbers = {"limit": c.limit, "consumed": c.consumed, "held": c.held, "requested": c.requested}
    return {
        "reason": "BUDGET_HELD",
        "dimension": d.value,
        **{k: ev.render_amount(d, v) for k, v in numbers.items()},
        "scope": c.balance.scope.value,
        "scopeId": c.balance.scope_id,
    }


def state_refusal(status: RunStatus) -> Refusal | None:
    """Reserve is refused unless the run is ACTIVE (Consume is always recorded)."""
    if status.state is RunState.FAILED:
        return exhausted_refusal(status.stopped_by)
    if status.state is RunState.INTERRUPTED:
        return {"reason": "RUN_INTERRUPTED", "state": status.state.value}
    if status.state is RunState.CLOSED:
        return {"reason": "RUN_CLOSED", "state": status.state.value}
    return None


def reserve_refusal(
    status: RunStatus,
    verdict: ModelVerdict | None,
    judged: tuple[Breach | None, Contention | None] | None,
) -> str:
    """The one precedence ("" when granted): the run's state, then the model policy (None: the
    call names no model), then a breach, then contention. `judged` is consulted only when
    neither state nor model refuses (None: it must not be needed)."""
    refused = state_refusal(status)
    if refused is not None:
        return refused["reason"]
    if verdict is not None and not verdict.allowed:
        return "BUDGET_MODEL_DENIED"
    if judged is None:
        raise AssertionError("the estimate is judged only once state and model allow the call")
    breach, contention = judged
    if breach is not None:
        return "BUDGET_EXHAUSTED"
    return "" if contention is None else "BUDGET_HELD"


def reused_refusal(request_id: str) -> Refusal:
    return {"reason": "REQUEST_ID_REUSED", "requestId": request_id}


# --- the state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One call of a batch, field for field budget_service.store.decisions.Item: Reserve,
    Consume or Release."""

    kind: str  # 'reserve' | 'consume' | 'release'
    run_id: str
    amounts: Quad = ZERO4  # estimate or usage in Dimension order
    request_id: str = ""
    fingerprint: bytes = b""
    reservation_id: str = ""  # reserve: the new hold's id; consume: '' = usage without a hold
    model: str = ""
    up_to: bool = False
    ttl_seconds: int = 0  # 0: the host default


@dataclass(frozen=True)
class Answer:
    """done (reply stored), replay, reused, not_found, refused, invalid."""

    outcome: str
    response: bytes | None = None
    refusal: Refusal | None = None


@dataclass(frozen=True)
class CheckAnswer:
    reason: str
    advisory_reason: str
    state: RunState
    dimensions: list[DimensionStatus]
    verdict: ModelVerdict | None

    @property
    def would_grant(self) -> bool:
        return not self.reason


@dataclass
class Hold:
    reservation_id: str
    run_id: str
    model: str
    requested: dict[Dimension, int]
    granted: dict[Dimension, int]
    state: ReservationState
    pools: tuple[PoolKey, ...]
    created_at: datetime
    expires_at: datetime
    policy_version: int
    model_calls: int = 0  # held on each of its pools

    def record(self) -> ReservationRecord:
        return ReservationRecord(
            self.reservation_id,
            self.run_id,
            self.model,
            dict(self.requested),
            dict(self.granted),
            self.state,
            self.pools,
            self.created_at,
            self.expires_at,
            self.model_calls,
        )


@dataclass
class PoolRow:
    consumed: dict[Dimension, int] = field(default_factory=amounts)
    held: dict[Dimension, int] = field(default_factory=amounts)
    consumed_model_calls: int = 0
    held_model_calls: int = 0


@dataclass(frozen=True)
class LedgerRow:
    run_id: str
    request_id: str | None
    decision: str
    policy_version: int
    reason: str | None = None
    reservation_id: str | None = None
    model: str | None = None
    consumed: Quad = ZERO4
    held: Quad = ZERO4
    pools: tuple[PoolKey, ...] = ()
    detail: Mapping[str, Any] | None = None
    consumed_model_calls: int = 0  # what the row moves on its pools
    held_model_calls: int = 0


@dataclass(frozen=True)
class EventRow:
    run_id: str
    seq: int
    type: str
    payload_json: str


def _dumps(doc: Mapping[str, Any]) -> bytes:
    """The stored reply encoding (stored_replies._dumps): sorted keys, no whitespace."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def view_bytes(dimensions: Sequence[DimensionStatus]) -> bytes:
    """The reply this model stores for OpenRun and ResumeRun (the tests encode the service's
    RunView the same way): the run's and its pools' dimensions."""
    return _dumps({"dimensions": encoders.statuses_doc(dimensions)})


def close_bytes(dimensions: Sequence[DimensionStatus], released: int) -> bytes:
    return _dumps({"dimensions": encoders.statuses_doc(dimensions), "released": released})


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BudgetOracle:
    """One tenant's runs, scope budgets, pool balance rows, holds, ledger, events and request
    log; each call is one transaction judged at `now`."""

    def __init__(
        self,
        *,
        host_advisory: bool = False,
        ceilings: HostCeilings | None = None,
        default_ttl_seconds: int = 300,
    ) -> None:
        self.host_advisory = host_advisory
        self.ceilings = ceilings or HostCeilings()
        self.default_ttl_seconds = default_ttl_seconds
        self.runs: dict[str, RunRecord] = {}
        self.scope_budgets: dict[tuple[Scope, str, ScopeBudgetKind], ScopeBudget] = {}
        self.pool_rows: dict[PoolKey, PoolRow] = {}
        self.holds: dict[tuple[str, str], Hold] = {}  # (run_id, reservation_id)
        self.ledger: list[LedgerRow] = []
        self.events: list[EventRow] = []
        self.request_log: dict[str, tuple[bytes, bytes]] = {}  # id -> (fingerprint, reply)

    # --- reading --------------------------------------------------------------------------

    def enforcement(self, run: RunRecord, host_advisory: bool | None = None) -> Enforcement:
        host = self.host_advisory if host_advisory is None else host_advisory
        return Enforcement.ADVISORY if host or run.scope_advisory else Enforcement.HARD

    def _config(self, ref: BalanceRef) -> ScopeBudget | None:
        return self.scope_budgets.get((ref.scope, ref.scope_id, ScopeBudgetKind.POOLED))

    def current_pools(self, run: RunRecord, now: datetime) -> dict[BalanceRef, PoolKey]:
        """The current window of each pooled budget the run draws on (in the run's order)."""
        found = {}
        for ref in run.pools:
            config = self._config(ref)
            if config is not None:  # a deleted pooled budget no longer binds
                found[ref] = PoolKey(ref, window_start(config.window, now))
        return found

    def overdue_on(self, key: PoolKey, now: datetime) -> dict[AnyDimension, int]:
        """What open holds past their expiry still hold on a pool row (they no longer count)."""
        total: dict[AnyDimension, int] = {d: 0 for d in ALL_DIMENSIONS}
        for hold in self.holds.values():
            if hold.state is ReservationState.OPEN and hold.expires_at <= now and key in hold.pools:
                for d in DIMENSIONS:
                    total[d] += hold.granted[d]
                total[MODEL_CALLS] += hold.model_calls
        return total

    def overdue_of(self, run_id: str, now: datetime) -> list[Hold]:
        return sorted(
            (
                h
                for h in self.holds.values()
                if h.run_id == run_id and h.state is ReservationState.OPEN and h.expires_at <= now
            ),
            key=lambda h: (h.created_at, h.reservation_id),
        )

    def open_holds(self, run_id: str) -> list[Hold]:
        return sorted(
            (
                h
                for h in self.holds.values()
                if h.run_id == run_id and h.state is ReservationState.OPEN
            ),
            key=lambda h: (h.created_at, h.reservation_id),
        )

    def judged(self, run: RunRecord, now: datetime, own_overdue: bool = False) -> Judged:
        """The run and the current window of every pool as a decision sees them: overdue holds
        (of any run) do not count. `own_overdue`: the run's own may still be open (Check)."""
        overdue = amounts()
        if own_overdue:
            for h in self.overdue_of(run.run_id, now):
                overdue = {d: overdue[d] + h.granted[d] for d in DIMENSIONS}
        own: dict[AnyDimension, Balance] = {d: b for d, b in run.balances(overdue).items()}
        found: dict[BalanceRef, Mapping[AnyDimension, Balance]] = {RUN_BALANCE: own}
        for ref, key in self.current_pools(run, now).items():
            config = self._config(ref)
            assert config is not None
            row = self.pool_rows.get(key, PoolRow())
            late = self.overdue_on(key, now) if key in self.pool_rows else None
            pool: dict[AnyDimension, Balance] = {
                d: Balance(
                    config.policy.limit(d), row.consumed[d], row.held[d] - (late or {}).get(d, 0)
                )
                for d in DIMENSIONS
            }
            pool[MODEL_CALLS] = Balance(
                config.max_model_calls,
                row.consumed_model_calls,
                row.held_model_calls - (late or {}).get(MODEL_CALLS, 0),
            )
            found[ref] = pool
        return found

    def statuses(
        self, run: RunRecord, now: datetime, own_overdue: bool = False
    ) -> list[DimensionStatus]:
        judged = self.judged(run, now, own_overdue)
        found = run_statuses(run, judged[RUN_BALANCE])
        current = self.current_pools(run, now)
        for ref in sorted(current, key=lambda r: r.sort_key):
            config = self._config(ref)
            end = window_end(config.window, current[ref].window_start) if config else None
            found += pool_statuses(ref, judged[ref], end)
        return found

    def ledger_of(self, run_id: str) -> list[LedgerRow]:
        return [row for row in self.ledger if row.run_id == run_id]

    def events_of(self, run_id: str) -> list[EventRow]:
        return [row for row in self.events if row.run_id == run_id]

    # --- setting up -----------------------------------------------------------------------

    def put_scope_budget(self, budget: ScopeBudget) -> None:
        """A scope budget, new or replaced: pooled limits are read live, per-run caps and
        enforcement bind runs opened after it."""
        self.scope_budgets[(budget.scope, budget.scope_id, budget.kind)] = budget

    def open_run(
        self,
        request_id: str,
        fingerprint: bytes,
        run_id: str,
        project_id: str,
        workflow_id: str,
        agent_id: str,
        policy: BudgetPolicy,
        now: datetime,
    ) -> Answer:
        logged = self._logged(request_id, fingerprint)
        if logged is not None:
            return logged
        if run_id in self.runs:
            raise NotImplementedError("this model opens each run once")
        owners = [(Scope.WORKFLOW, workflow_id), (Scope.AGENT, agent_id)]
        refs = [BalanceRef(s, i) for s, i in owners if i] + [BalanceRef(Scope.PROJECT, project_id)]
        scopes = sorted(
            (b for b in self.scope_budgets.values() if BalanceRef(b.scope, b.scope_id) in refs),
            key=lambda b: (b.scope.rank, b.scope_id, b.kind.value),
        )
        budget = resolve_effective_budget(policy, scopes, self.ceilings)
        pools = tuple(
            BalanceRef(b.scope, b.scope_id) for b in scopes if b.kind is ScopeBudgetKind.POOLED
        )
        run = RunRecord(
            run_id=run_id,
            project_id=project_id,
            workflow_id=workflow_id,
            agent_id=agent_id,
            budget=budget,
            status=RunStatus(),
            consumed=amounts(),
            held=amounts(),
            pools=pools,
            scope_advisory=any(b.enforcement is Enforcement.ADVISORY for b in scopes),
            policy_version=1,
            next_seq=1,
            open_fingerprint=b"",
            created_at=now,
            updated_at=now,
        )
        self.runs[run_id] = run
        detail = {"pools": [f"{p.scope.value}:{p.scope_id}" for p in pools]}
        self._ledger(run, request_id, "open", detail=detail)
        self._events(run_id, [ev.BudgetReserved(budget, budget.scope)])
        return self._done(
            request_id, fingerprint, view_bytes(self.statuses(self.runs[run_id], now))
        )

    # --- changing -------------------------------------------------------------------------

    def _logged(self, request_id: str, fingerprint: bytes) -> Answer | None:
        stored = self.request_log.get(request_id)
        if stored is None:
            return None
        if stored[0] != fingerprint:
            return Answer("reused", refusal=reused_refusal(request_id))
        return Answer("replay", stored[1])

    def _done(self, request_id: str, fingerprint: bytes, response: bytes) -> Answer:
        self.request_log[request_id] = (fingerprint, response)
        return Answer("done", response)

    def _ledger(
        self,
        run: RunRecord,
        request_id: str | None,
        decision: str,
        *,
        reason: str | None = None,
        reservation_id: str | None = None,
        model: str | None = None,
        consumed: Mapping[Dimension, int] | None = None,
        held: Mapping[Dimension, int] | None = None,
        pools: Sequence[PoolKey] = (),
        detail: Mapping[str, Any] | None = None,
        consumed_model_calls: int = 0,
        held_model_calls: int = 0,
    ) -> None:
        self.ledger.append(
            LedgerRow(
                run.run_id,
                request_id,
                decision,
                run.policy_version,
                reason,
                reservation_id,
                model,
                quad(consumed),
                quad(held),
                tuple(pools),
                detail,
                consumed_model_calls,
                held_model_calls,
            )
        )

    def _events(self, run_id: str, events: Iterable[ev.BudgetEvent]) -> None:
        run = self.runs[run_id]
        seq = run.next_seq
        for event in events:
            self.events.append(EventRow(run_id, seq, event.event_type, event.payload_json()))
            seq += 1
        self.runs[run_id] = replace(run, next_seq=seq)

    def _lock(self, run_id: str, request_id: str | None, now: datetime) -> None:
        """What locking a run does before any decision: its current pool windows get their
        rows, and its overdue holds expire (the ledger rows carry `request_id`)."""
        run = self.runs[run_id]
        for key in self.current_pools(run, now).values():
            self.pool_rows.setdefault(key, PoolRow())
        for hold in self.overdue_of(run_id, now):
            self._end(hold, ReservationState.EXPIRED, "expire", request_id)

    def _end(
        self, hold: Hold, state: ReservationState, decision: str, request_id: str | None
    ) -> None:
        """Release or expiry: the hold stops counting on the run and on its pools."""
        run = self.runs[hold.run_id]
        after = settle_reservation(run.balances(), hold.granted)
        run = self.runs[hold.run_id] = replace(run, held={d: b.held for d, b in after.items()})
        for key in hold.pools:
            row = self.pool_rows.get(key)
            if row is not None:
                self.pool_rows[key] = self._settle_pool(row, hold, None, 0)
        self._ledger(
            run,
            request_id,
            decision,
            reservation_id=hold.reservation_id,
            model=hold.model,
            held=negated(hold.granted),
            pools=hold.pools,
            held_model_calls=-hold.model_calls,
        )
        hold.state = state

    @staticmethod
    def _settle_pool(
        row: PoolRow, hold: Hold | None, usage: Amounts | None, model_calls: int
    ) -> PoolRow:
        """Usage (and `model_calls` recorded) on a pool row; the settled hold stops counting."""
        before = {d: Balance(None, row.consumed[d], row.held[d]) for d in DIMENSIONS}
        after = settle_reservation(before, hold.granted if hold else None, usage)
        held_model_calls = row.held_model_calls - (hold.model_calls if hold else 0)
        if held_model_calls < 0:
            raise ValueError("settling a model call the pool does not hold")
        return PoolRow(
            {d: b.consumed for d, b in after.items()},
            {d: b.held for d, b in after.items()},
            row.consumed_model_calls + model_calls,
            held_model_calls,
        )

    # --- Reserve, Consume and Release: decide_v1 ------------------------------------------

    @staticmethod
    def _asked(estimate: Amounts, model: str) -> dict[AnyDimension, int]:
        """What a Reserve or Check asks of its balances: the estimate, and one model call
        when it names a model (a tool call or retry without one is no model call)."""
        asked: dict[AnyDimension, int] = {d: estimate.get(d, 0) for d in DIMENSIONS}
        asked[MODEL_CALLS] = 1 if model else 0
        return asked

    def reserve(self, item: Item, now: datetime, host_advisory: bool | None = None) -> Answer:
        assert item.kind == "reserve"
        return self.decide_batch([item], now, host_advisory)[0]

    def consume(self, item: Item, now: datetime, host_advisory: bool | None = None) -> Answer:
        assert item.kind == "consume"
        return self.decide_batch([item], now, host_advisory)[0]

    def release(self, item: Item, now: datetime, host_advisory: bool | None = None) -> Answer:
        assert item.kind == "release"
        return self.decide_batch([item], now, host_advisory)[0]

    def decide_batch(
        self, items: Sequence[Item], now: datetime, host_advisory: bool | None = None
    ) -> list[Answer]:
        """One batch of one tenant, in arrival order, as one transaction (engine.md):

        1. a request id already logged replays (same fingerprint) or is reused (another one),
           and writes nothing; within the batch, an item whose id an earlier item stored (it
           was done) replays or is reused the same way, and one whose earlier twin was refused
           (it stored nothing) is decided again: a batch answers as its items would one by one;
        2. the runs of the other items are locked (a missing run: not_found) and their current
           pool windows get rows;
        3. every locked run's overdue holds expire first, their ledger rows carrying the
           request id of the batch's first such item on that run (they stay whatever that
           item's fate);
        4. each item is decided in order against the state the earlier ones left.
        """
        answers: list[Answer | None] = [None] * len(items)
        first_request: dict[str, str] = {}
        for i, item in enumerate(items):
            logged = self._logged(item.request_id, item.fingerprint)
            if logged is not None:
                answers[i] = logged
            elif item.run_id not in self.runs:
                answers[i] = Answer("not_found", refusal={"reason": "RUN_NOT_FOUND"})
            else:
                first_request.setdefault(item.run_id, item.request_id)
        for run_id in sorted(first_request):  # the lock order: run_id COLLATE "C"
            self._lock(run_id, first_request[run_id], now)
        for i, item in enumerate(items):
            if answers[i] is not None:
                continue
            logged = self._logged(item.request_id, item.fingerprint)  # stored by an earlier item
            if logged is not None:
                answers[i] = logged
                continue
            try:
                answers[i] = self._decide(item, now, host_advisory)
            except Invalid as invalid:
                answers[i] = Answer(
                    "invalid", refusal={"reason": "VALIDATION_FAILED", "field": invalid.path}
                )
        assert all(a is not None for a in answers)
        return [a for a in answers if a is not None]

    def _decide(self, item: Item, now: datetime, host_advisory: bool | None) -> Answer:
        run = self.runs[item.run_id]
        enforcement = self.enforcement(run, host_advisory)
        if item.kind == "reserve":
            return self._reserve(item, run, enforcement, now)
        if item.kind == "consume":
            return self._consume(item, run, enforcement, now)
        if item.kind == "release":
            return self._release(item, now)
        raise ValueError(f"unknown item kind {item.kind!r}")

    def _refuse(self, item: Item, refusal: Refusal) -> Answer:
        """A hard refusal of a Reserve leaves an append-only trace, no hold, no stored reply."""
        requested = {d.value: v for d, v in amounts(item.amounts).items()}
        self._ledger(
            self.runs[item.run_id],
            item.request_id,
            "refusal",
            reason=refusal["reason"],
            model=item.model,
            detail={"requested": requested},
        )
        return Answer("refused", refusal=refusal)

    def _reserve(
        self, item: Item, run: RunRecord, enforcement: Enforcement, now: datetime
    ) -> Answer:
        hard = enforcement is Enforcement.HARD
        estimate = amounts(item.amounts)
        refused = state_refusal(run.status)
        if refused is not None:
            return self._refuse(item, refused)
        verdict = model_verdict(item.model, run.budget.model_lists)
        # A tool-call or retry hold names no model: model policy governs model calls only.
        if item.model and not verdict.allowed and hard:
            scope = verdict.scope or Scope.RUN
            denied = {"model": item.model, "scope": scope.value, "scopeId": run.scope_id(scope)}
            return self._refuse(item, {"reason": "BUDGET_MODEL_DENIED", **denied})
        mode = ReserveMode.UP_TO if item.up_to else ReserveMode.ALL_OR_NOTHING
        decision = decide_reserve(
            self.judged(run, now), self._asked(estimate, item.model), mode, enforcement
        )
        if decision.breach is not None and hard and decision.breach.balance.scope is not Scope.RUN:
            # A pool that cannot fit refuses; the run lives (no event, no state change).
            return self._refuse(item, exhausted_refusal(decision.breach))
        if decision.breach is not None and hard:
            outcome = apply_reserve_breach(decision.breach, run.status, run.budget, enforcement)
            self.runs[run.run_id] = replace(run, status=outcome.status)
            self._events(run.run_id, outcome.events)
            if hard:
                if outcome.status.state is RunState.INTERRUPTED:
                    return self._refuse(item, {"reason": "RUN_INTERRUPTED", "state": "interrupted"})
                return self._refuse(item, exhausted_refusal(decision.breach))
        elif decision.contention is not None and hard:
            return self._refuse(item, held_refusal(decision.contention))
        reason = reserve_refusal(
            run.status,  # as it was before this call: the run was ACTIVE
            verdict if item.model else None,
            (decision.breach, decision.contention),
        )
        run = self.runs[run.run_id]
        current = self.current_pools(run, now)
        granted = amounts(decision.granted)
        hold = Hold(
            reservation_id=item.reservation_id,
            run_id=run.run_id,
            model=item.model,
            requested=estimate,
            granted=granted,
            state=ReservationState.OPEN,
            pools=tuple(current[ref] for ref in sorted(current, key=lambda r: r.sort_key)),
            created_at=now,
            expires_at=now + timedelta(seconds=item.ttl_seconds or self.default_ttl_seconds),
            policy_version=run.policy_version,
            model_calls=decision.granted.get(MODEL_CALLS, 0),
        )
        run = replace(
            run,
            held={d: run.held[d] + granted[d] for d in DIMENSIONS},
            advisory_refusals=run.advisory_refusals + (1 if reason else 0),
        )
        self.runs[run.run_id] = run
        for key in hold.pools:
            row = self.pool_rows[key]
            row.held = {d: row.held[d] + granted[d] for d in DIMENSIONS}
            row.held_model_calls += hold.model_calls
        self.holds[(run.run_id, hold.reservation_id)] = hold
        self._ledger(
            run,
            item.request_id,
            "grant",
            reason=reason or None,
            reservation_id=hold.reservation_id,
            model=hold.model,
            held=granted,
            pools=hold.pools,
            held_model_calls=hold.model_calls,
        )
        result = ReserveResult(hold.record(), self.statuses(run, now), reason)
        return self._done(item.request_id, item.fingerprint, encoders.reserve_bytes(result))

    def _named_hold(self, item: Item, now: datetime) -> Hold | None:
        hold = self.holds.get((item.run_id, item.reservation_id))
        if hold is not None:
            # Locking expired every overdue hold of the run: an open one is live.
            state = effective_reservation_state(hold.state, hold.expires_at, now)
            assert state is hold.state, "an overdue hold of a locked run is still open"
        return hold

    def _consume(
        self, item: Item, run: RunRecord, enforcement: Enforcement, now: datetime
    ) -> Answer:
        usage = amounts(item.amounts)
        reservation: Hold | None = None
        hold_state: ReservationState | None = None
        if item.reservation_id:
            found = self._named_hold(item, now)
            if found is None:
                return Answer("refused", refusal={"reason": "RESERVATION_NOT_FOUND"})
            if found.state is ReservationState.CONSUMED:
                return Answer(
                    "refused", refusal={"reason": "RESERVATION_SETTLED", "state": "consumed"}
                )
            # A released or expired hold no longer counts: the usage is recorded without it.
            reservation = found if found.state is ReservationState.OPEN else None
            hold_state = ReservationState.CONSUMED if reservation else found.state
        granted = reservation.granted if reservation else None
        outcome = apply_consume(run.balances(), granted, usage, run.budget, run.status, enforcement)
        keys = reservation.pools if reservation else tuple(self.current_pools(run, now).values())
        # A Consume naming a model records one model call; so does settling a hold that held
        # one (the call it reserved for), whatever the Consume names.
        model_calls = max(1 if item.model else 0, reservation.model_calls if reservation else 0)
        pools = {
            key: self._settle_pool(self.pool_rows[key], reservation, usage, model_calls)
            for key in keys
            if key in self.pool_rows
        }
        run = replace(
            run,
            status=outcome.status,
            consumed={d: b.consumed for d, b in outcome.balances.items()},
            held={d: b.held for d, b in outcome.balances.items()},
        )
        self.runs[run.run_id] = run
        self.pool_rows.update(pools)
        self._events(run.run_id, outcome.events)
        self._ledger(
            run,
            item.request_id,
            "consume",
            reservation_id=reservation.reservation_id
            if reservation
            else item.reservation_id or None,
            model=item.model,
            consumed=usage,
            held=negated(granted),
            pools=keys,
            consumed_model_calls=model_calls,
            held_model_calls=-(reservation.model_calls if reservation else 0),
        )
        if reservation is not None:
            reservation.state = ReservationState.CONSUMED
        run = self.runs[run.run_id]
        result = ConsumeResult(
            outcome.overrun, self.statuses(run, now), run.status.state, hold_state
        )
        return self._done(item.request_id, item.fingerprint, encoders.consume_bytes(result))

    def _release(self, item: Item, now: datetime) -> Answer:
        found = self._named_hold(item, now)
        if found is None:
            return Answer("refused", refusal={"reason": "RESERVATION_NOT_FOUND"})
        if found.state is not ReservationState.OPEN:
            return Answer(
                "refused", refusal={"reason": "RESERVATION_SETTLED", "state": found.state.value}
            )
        self._end(found, ReservationState.RELEASED, "release", item.request_id)
        return self._done(item.request_id, item.fingerprint, encoders.release_bytes(found.record()))

    # --- Check: read-only -----------------------------------------------------------------

    def check(
        self,
        run_id: str,
        model: str,
        estimate: Quad,
        now: datetime,
        host_advisory: bool | None = None,
    ) -> CheckAnswer | None:
        """Judged exactly as Reserve would (all or nothing), writing nothing; overdue holds of
        any run do not count. None: no such run."""
        run = self.runs.get(run_id)
        if run is None:
            return None
        judged = self.judged(run, now, own_overdue=True)
        verdict = model_verdict(model, run.budget.model_lists) if model else None
        if verdict is not None and verdict.scope is not None:
            verdict = replace(verdict, scope_id=run.scope_id(verdict.scope))
        if state_refusal(run.status) is None and (verdict is None or verdict.allowed):
            decision = decide_reserve(judged, self._asked(amounts(estimate), model))
            reason = reserve_refusal(run.status, verdict, (decision.breach, decision.contention))
        else:
            reason = reserve_refusal(run.status, verdict, None)
        advisory_reason = ""
        if (
            self.enforcement(run, host_advisory) is Enforcement.ADVISORY
            and reason in BUDGET_REASONS
        ):
            reason, advisory_reason = "", reason
        dimensions = self.statuses(run, now, own_overdue=True)
        return CheckAnswer(reason, advisory_reason, run.status.state, dimensions, verdict)

    # --- run lifecycle --------------------------------------------------------------------

    def resume(
        self,
        request_id: str,
        fingerprint: bytes,
        run_id: str,
        delta: Mapping[Dimension, int],
        approver: str,
        now: datetime,
        note: str = "",
    ) -> Answer:
        """ResumeRun: a refused one writes nothing at all (not even the expiries it found)."""
        logged = self._logged(request_id, fingerprint)
        if logged is not None:
            return logged
        run = self.runs.get(run_id)
        if run is None:
            return Answer("not_found", refusal={"reason": "RUN_NOT_FOUND"})
        refused = resume_refusal(run.status)
        if refused is not None:
            return Answer("refused", refusal=refused)
        outcome = apply_resume(run.budget, run.status, delta, self.ceilings)  # may be Invalid
        self._lock(run_id, request_id, now)
        run = self.runs[run_id]
        self.runs[run_id] = replace(
            run,
            status=outcome.status,
            budget=outcome.budget,
            policy_version=run.policy_version + 1,
        )
        self._events(run_id, outcome.events)
        raised = {
            d.value: new - old
            for d in DIMENSIONS
            if (old := run.budget.limit(d)) is not None
            and (new := outcome.budget.limit(d)) is not None
            and new != old
        }
        requested = {d.value: v for d, v in delta.items() if v}
        detail: dict[str, Any] = {"delta": raised, "requested": requested, "approver": approver}
        if note:
            detail["note"] = note
        self._ledger(self.runs[run_id], request_id, "resume", detail=detail)
        return self._done(
            request_id, fingerprint, view_bytes(self.statuses(self.runs[run_id], now))
        )

    def close(
        self, request_id: str, fingerprint: bytes, run_id: str, outcome: RunOutcome, now: datetime
    ) -> Answer:
        """CloseRun releases every open hold (oldest first) and ends the run: FAILED stays
        FAILED, anything else becomes CLOSED; closing again changes nothing."""
        logged = self._logged(request_id, fingerprint)
        if logged is not None:
            return logged
        if run_id not in self.runs:
            return Answer("not_found", refusal={"reason": "RUN_NOT_FOUND"})
        self._lock(run_id, request_id, now)
        released = 0
        if self.runs[run_id].outcome is None:
            for hold in self.open_holds(run_id):
                self._end(hold, ReservationState.RELEASED, "release", request_id)
                released += 1
            run = self.runs[run_id]
            state = run.status.state
            status = (
                run.status
                if state is RunState.FAILED
                else replace(run.status, state=RunState.CLOSED)
            )
            run = self.runs[run_id] = replace(run, status=status, outcome=outcome)
            self._ledger(run, request_id, "close", detail={"outcome": outcome.value})
        dims = self.statuses(self.runs[run_id], now)
        return self._done(request_id, fingerprint, close_bytes(dims, released))

    # --- time passing ---------------------------------------------------------------------

    def set_expiry(self, run_id: str, reservation_id: str, expires_at: datetime) -> None:
        self.holds[(run_id, reservation_id)].expires_at = expires_at

    def sweep(self, now: datetime) -> int:
        """The sweeper: every run with an overdue hold is locked and its overdue holds expire
        (ledger rows without a request id). Returns how many holds expired."""
        overdue_runs = sorted(
            {
                h.run_id
                for h in self.holds.values()
                if h.state is ReservationState.OPEN and h.expires_at <= now
            }
        )
        count = 0
        for run_id in overdue_runs:
            count += len(self.overdue_of(run_id, now))
            self._lock(run_id, None, now)
        return count

    def shift_windows(self, days: int = 1) -> None:
        """Calendar windows move on: every windowed pool row (and the holds drawing on it)
        is moved `days` into the past, as if that much time had passed since it was written.
        Ledger rows keep the windows they were written with."""

        def moved(key: PoolKey) -> PoolKey:
            config = self._config(key.ref)
            if config is None or config.window is Window.NONE:
                return key
            return PoolKey(key.ref, key.window_start - timedelta(days=days))

        self.pool_rows = {moved(k): row for k, row in self.pool_rows.items()}
        for hold in self.holds.values():
            hold.pools = tuple(moved(k) for k in hold.pools)
