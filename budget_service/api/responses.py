"""Budget results to protobuf responses (typed events, balances, runs, holds, scope budgets)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from budget_service.api.capabilities import BudgetCapabilities
from budget_service.api.requests import (
    ENFORCEMENTS,
    KINDS,
    ON_EXHAUSTION,
    OUTCOMES,
    SCOPES,
    WINDOWS,
    page_token,
    scope_budgets_page_token,
    spend_page_token,
)
from budget_service.domain import commands as cmd
from budget_service.domain import events as ev
from budget_service.domain.policy import (
    AnyDimension,
    BudgetPolicy,
    Dimension,
    EffectiveBudget,
    Enforcement,
    ModelVerdict,
    PoolDimension,
    Scope,
)
from budget_service.domain.records import (
    DimensionStatus,
    ReservationRecord,
    RunRecord,
    StoredScopeBudget,
)
from budget_service.domain.run_state import ReservationState, RunState
from budget_service.domain.spend import SpendPage, SpendQuery
from budget_service.store.reads import StoredEvent
from budget_service.usecases.tenant_events import Checkpoint, TenantItem
from ration.budget.v1 import budget_pb2 as pb
from servicekit.timestamps import timestamp

K = TypeVar("K", bound=int)
V = TypeVar("V")

DIMENSIONS: dict[AnyDimension, pb.Dimension] = {
    Dimension.TOKENS: pb.DIMENSION_TOKENS,
    Dimension.COST: pb.DIMENSION_COST,
    Dimension.TOOL_CALLS: pb.DIMENSION_TOOL_CALLS,
    Dimension.RETRIES: pb.DIMENSION_RETRIES,
    PoolDimension.MODEL_CALLS: pb.DIMENSION_MODEL_CALLS,
}
STATES = {
    RunState.ACTIVE: pb.RUN_STATE_ACTIVE,
    RunState.INTERRUPTED: pb.RUN_STATE_INTERRUPTED,
    RunState.FAILED: pb.RUN_STATE_FAILED,
    RunState.CLOSED: pb.RUN_STATE_CLOSED,
}
EVENT_TYPES = {
    ev.BudgetReserved.event_type: pb.RUN_EVENT_TYPE_BUDGET_RESERVED,
    ev.BudgetConsumed.event_type: pb.RUN_EVENT_TYPE_BUDGET_CONSUMED,
    ev.ThresholdCrossed.event_type: pb.RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED,
    ev.BudgetExhausted.event_type: pb.RUN_EVENT_TYPE_BUDGET_EXHAUSTED,
    ev.CapBreached.event_type: pb.RUN_EVENT_TYPE_CAP_BREACHED,
    ev.RunFailed.event_type: pb.RUN_EVENT_TYPE_RUN_FAILED,
}
RESERVATION_STATES = {
    ReservationState.OPEN: pb.RESERVATION_STATE_OPEN,
    ReservationState.CONSUMED: pb.RESERVATION_STATE_CONSUMED,
    ReservationState.RELEASED: pb.RESERVATION_STATE_RELEASED,
    ReservationState.EXPIRED: pb.RESERVATION_STATE_EXPIRED,
}


def _reverse(table: Mapping[K, V]) -> dict[V, K]:
    """Domain value to proto number; a real number wins over UNSPECIFIED (0), which in the
    input tables only stands for a default."""
    found: dict[V, K] = {}
    for number, value in sorted(table.items(), key=lambda item: -int(item[0])):
        found.setdefault(value, number)
    return found


SCOPE_NUMBERS = _reverse(SCOPES)
KIND_NUMBERS = _reverse(KINDS)
WINDOW_NUMBERS = _reverse(WINDOWS)
ENFORCEMENT_NUMBERS = _reverse(ENFORCEMENTS)
ON_EXHAUSTION_NUMBERS = _reverse(ON_EXHAUSTION)
OUTCOME_NUMBERS = _reverse(OUTCOMES)


_AMOUNT_FIELDS = tuple((d, d.field_name) for d in Dimension)


def amounts(values: Mapping[Dimension, int]) -> pb.Amounts:
    return pb.Amounts(**{name: values.get(d, 0) for d, name in _AMOUNT_FIELDS})


def effective_budget(budget: EffectiveBudget) -> pb.EffectiveBudget:
    message = pb.EffectiveBudget(
        threshold_percent=budget.threshold_percent,
        on_exhaustion=ON_EXHAUSTION_NUMBERS[budget.on_exhaustion],
    )
    for d in Dimension:
        limit = budget.limit(d)
        if limit is not None:
            setattr(message, d.spec.limit_field, limit)
    return message


def add_dimensions(
    add: Callable[..., pb.DimensionStatus], statuses: Sequence[DimensionStatus]
) -> None:
    """Appends the statuses through a repeated field's `add`. Messages are filled in place
    here: on this protobuf runtime (upb) that is cheaper than building them first for a
    constructor to copy."""
    for s in statuses:
        message = add(
            dimension=DIMENSIONS[s.dimension],
            consumed=s.consumed,
            held=s.held,
            binding_scope=SCOPE_NUMBERS[s.binding_scope],
            binding_scope_id=s.binding_scope_id,
            clamped_by=s.clamped_by,
        )
        if s.limit is not None:
            message.limit = s.limit
        if s.remaining is not None:
            message.remaining = s.remaining
        if s.window_end is not None:
            message.window_end.CopyFrom(timestamp(s.window_end))


def run(view: cmd.RunView) -> pb.Run:
    r = view.run
    message = pb.Run(
        run_id=r.run_id,
        project_id=r.project_id,
        workflow_id=r.workflow_id,
        agent_id=r.agent_id,
        state=STATES[r.status.state],
        effective_budget=effective_budget(r.budget),
        policy_version=r.policy_version,
        outcome=OUTCOME_NUMBERS[r.outcome] if r.outcome else pb.RUN_OUTCOME_UNSPECIFIED,
        failure_code=r.status.failure_code,
        created_at=timestamp(r.created_at),
        updated_at=timestamp(r.updated_at),
        advisory=view.advisory,
        advisory_refusals=r.advisory_refusals,
        end_user_id=r.end_user_id,
        api_key_id=r.api_key_id,
        tags=dict(r.tags),
    )
    add_dimensions(message.dimensions.add, view.dimensions)
    return message


def reservation(record: ReservationRecord) -> pb.Reservation:
    return pb.Reservation(
        reservation_id=record.reservation_id,
        run_id=record.run_id,
        model=record.model,
        requested=amounts(record.requested),
        granted=amounts(record.granted),
        state=RESERVATION_STATES[record.state],
        expires_at=timestamp(record.expires_at),
        created_at=timestamp(record.created_at),
    )


def reserve(result: cmd.ReserveResult) -> pb.ReserveResponse:
    message = pb.ReserveResponse(
        reservation=reservation(result.reservation),
        advisory_refusal_reason=result.advisory_refusal_reason,
    )
    add_dimensions(message.dimensions.add, result.dimensions)
    return message


def consume(result: cmd.ConsumeResult) -> pb.ConsumeResponse:
    reservation_state = (
        RESERVATION_STATES[result.reservation_state]
        if result.reservation_state
        else pb.RESERVATION_STATE_UNSPECIFIED
    )
    message = pb.ConsumeResponse(
        overrun=amounts(result.overrun),
        state=STATES[result.state],
        reservation_state=reservation_state,
    )
    add_dimensions(message.dimensions.add, result.dimensions)
    return message


def model_verdict(verdict: ModelVerdict) -> pb.ModelVerdict:
    scope = verdict.scope
    return pb.ModelVerdict(
        allowed=verdict.allowed,
        scope=SCOPE_NUMBERS[scope] if scope else pb.SCOPE_UNSPECIFIED,
        scope_id=verdict.scope_id,
    )


def check(result: cmd.CheckResult) -> pb.CheckResponse:
    message = pb.CheckResponse(
        would_grant=result.would_grant,
        refusal_reason=result.refusal_reason,
        state=STATES[result.state],
        advisory_refusal_reason=result.advisory_refusal_reason,
    )
    add_dimensions(message.dimensions.add, result.dimensions)
    if result.verdict is not None:
        message.model_verdict.CopyFrom(model_verdict(result.verdict))
    return message


def _typed(event: ev.BudgetEvent, message: pb.RunEvent) -> None:
    if isinstance(event, ev.BudgetReserved):
        message.budget_reserved.effective_budget.CopyFrom(effective_budget(event.effective_budget))
        message.budget_reserved.scope = event.scope.value
        message.budget_reserved.binding_scope = SCOPE_NUMBERS[event.scope]
    elif isinstance(event, ev.BudgetConsumed):
        message.budget_consumed.CopyFrom(
            pb.BudgetConsumedPayload(
                dimension=DIMENSIONS[event.dimension],
                consumed=event.consumed,
                limit=event.limit,
                remaining=event.remaining,
            )
        )
    elif isinstance(event, ev.ThresholdCrossed):
        message.budget_threshold_crossed.CopyFrom(
            pb.BudgetThresholdCrossedPayload(
                dimension=DIMENSIONS[event.dimension],
                consumed=event.consumed,
                limit=event.limit,
                percent=event.percent,
            )
        )
    elif isinstance(event, ev.BudgetExhausted):
        message.budget_exhausted.CopyFrom(
            pb.BudgetExhaustedPayload(
                dimension=DIMENSIONS[event.dimension], consumed=event.consumed, limit=event.limit
            )
        )
    elif isinstance(event, ev.CapBreached):
        message.cap_breached.CopyFrom(
            pb.CapBreachedPayload(
                kind=event.kind,
                dimension=DIMENSIONS[event.dimension],
                limit=event.limit,
                observed=event.observed,
            )
        )
    else:
        message.run_failed.CopyFrom(pb.RunFailedPayload(code=event.code, message=event.message))


def run_event(run: RunRecord | None, stored: StoredEvent) -> pb.RunEvent:
    """A run's event (typed against its budget), or with no run a pool's own event."""
    message = pb.RunEvent(
        run_id=run.run_id if run is not None else "",
        seq=stored.seq,
        type=stored.type,
        event_type=EVENT_TYPES[stored.type],
        created_at=timestamp(stored.created_at),
        payload_json=stored.payload_json,
    )
    base = run.budget if run is not None else None
    _typed(ev.decode(stored.type, stored.payload_json, base), message)
    return message


def tenant_item(item: TenantItem) -> pb.WatchTenantEventsResponse:
    """An event with its run's owners, or a checkpoint (a cursor alone)."""
    cursor = item.position.cursor()
    if isinstance(item, Checkpoint):
        return pb.WatchTenantEventsResponse(cursor=cursor)
    run, pool = item.run, item.pool
    if pool is not None:
        scope = pool.ref.scope
        return pb.WatchTenantEventsResponse(
            event=run_event(None, item.event),
            cursor=cursor,
            project_id=pool.ref.scope_id if scope is Scope.PROJECT else "",
            pool_scope=SCOPE_NUMBERS[scope],
            pool_scope_id=pool.ref.scope_id,
            pool_window_start=timestamp(pool.window_start),
        )
    assert run is not None
    return pb.WatchTenantEventsResponse(
        event=run_event(run, item.event),
        cursor=cursor,
        project_id=run.project_id,
        workflow_id=run.workflow_id,
        agent_id=run.agent_id,
    )


def _policy(policy: BudgetPolicy) -> pb.BudgetPolicy:
    message = pb.BudgetPolicy(
        model_deny=list(policy.model_deny),
        on_exhaustion=ON_EXHAUSTION_NUMBERS[policy.on_exhaustion],
    )
    for d in Dimension:
        limit = policy.limit(d)
        if limit is not None:
            setattr(message, d.spec.limit_field, limit)
    if policy.model_allow is not None:
        message.model_allow.CopyFrom(pb.ModelPatterns(patterns=list(policy.model_allow)))
    if policy.threshold_percent is not None:
        message.threshold_percent = policy.threshold_percent
    return message


def scope_budget(stored: StoredScopeBudget) -> pb.ScopeBudget:
    b = stored.budget
    return pb.ScopeBudget(
        scope=SCOPE_NUMBERS[b.scope],
        scope_id=b.scope_id,
        kind=KIND_NUMBERS[b.kind],
        policy=_policy(b.policy),
        window=WINDOW_NUMBERS[b.window],
        enforcement=ENFORCEMENT_NUMBERS[b.enforcement],
        model_match=b.model_match,
        max_model_calls=b.max_model_calls,
        version=stored.version,
        updated_at=timestamp(stored.updated_at),
    )


def get_scope_budget(view: cmd.ScopeBudgetView) -> pb.GetScopeBudgetResponse:
    message = pb.GetScopeBudgetResponse(budget=scope_budget(view.stored))
    if view.pool is not None:
        balance, pool_budget = view.pool.balance, view.pool.budget
        statuses = [
            DimensionStatus(
                d,
                b.limit,
                b.consumed,
                b.held,
                b.remaining,
                balance.key.ref.scope,
                balance.key.ref.scope_id,
            )
            for d, b in balance.reported(pool_budget.policy, pool_budget.max_model_calls).items()
        ]
        pool = message.balance
        pool.window_start.CopyFrom(timestamp(balance.key.window_start))
        add_dimensions(pool.dimensions.add, statuses)
    return message


def capabilities(caps: BudgetCapabilities) -> pb.GetCapabilitiesResponse:
    limits = pb.BudgetLimits()
    if caps.max_budget_tokens is not None:
        limits.max_budget_tokens = caps.max_budget_tokens
    if caps.max_budget_cost_nanos is not None:
        limits.max_budget_cost_nanos = caps.max_budget_cost_nanos
    return pb.GetCapabilitiesResponse(
        budget=pb.BudgetCapability(
            supported=True,
            dimensions=list(caps.dimensions),
            enforce=caps.enforce,
            scopes=list(caps.scopes),
            enforcement=ENFORCEMENT_NUMBERS[Enforcement(caps.enforce)],
            scope_levels=[SCOPE_NUMBERS[Scope(s)] for s in caps.scopes],
        ),
        limits=limits,
        capabilities_json=caps.to_json(),
    )


def list_scope_budgets(
    query: cmd.ScopeBudgetQuery, page: cmd.ScopeBudgetPage
) -> pb.ListScopeBudgetsResponse:
    after = page.next_after
    return pb.ListScopeBudgetsResponse(
        budgets=[scope_budget(stored) for stored in page.budgets],
        next_page_token="" if after is None else scope_budgets_page_token(query, after),
    )


def report_spend(query: SpendQuery, page: SpendPage) -> pb.ReportSpendResponse:
    """One page of spend rows, with the token of the next page (empty on the last)."""
    after = page.next_after_key
    message = pb.ReportSpendResponse(
        next_page_token="" if after is None else spend_page_token(query, after)
    )
    for row in page.rows:
        found = message.rows.add(
            key=row.key,
            cost_nanos=row.cost_nanos,
            tokens=row.tokens,
            tool_calls=row.tool_calls,
            retries=row.retries,
            consume_count=row.consume_count,
        )
        if row.bucket_start is not None:
            found.bucket_start.CopyFrom(timestamp(row.bucket_start))
    return message


def list_run_events(run_id: str, page: cmd.EventsPage) -> pb.ListRunEventsResponse:
    """One page of events, with the token of the next page (empty on the last)."""
    after = page.next_after_seq
    token = "" if after is None else page_token(run_id, after)
    return pb.ListRunEventsResponse(
        events=[run_event(page.run, e) for e in page.events], next_page_token=token
    )


# Stored replies of the run and scope-budget mutations: the response's deterministic bytes,
# stored with the effect and replayed as they are (decoded by the servicer, fresh or replayed).
def open_run_reply(view: cmd.RunView) -> bytes:
    return pb.OpenRunResponse(run=run(view)).SerializeToString(deterministic=True)


def close_run_reply(result: cmd.CloseResult) -> bytes:
    response = pb.CloseRunResponse(run=run(result.view), released_holds=result.released_holds)
    return response.SerializeToString(deterministic=True)


def resume_run_reply(view: cmd.RunView) -> bytes:
    return pb.ResumeRunResponse(run=run(view)).SerializeToString(deterministic=True)


def put_scope_budget_reply(view: cmd.ScopeBudgetView) -> bytes:
    response = pb.PutScopeBudgetResponse(budget=scope_budget(view.stored))
    return response.SerializeToString(deterministic=True)


def delete_scope_budget_reply(_: None) -> bytes:
    return pb.DeleteScopeBudgetResponse().SerializeToString(deterministic=True)
