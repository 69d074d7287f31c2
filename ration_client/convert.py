"""Budget protobuf messages to the client's views and back: the only place that knows both."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from ration.budget.v1 import budget_pb2 as pb
from ration_client import views as v

E = TypeVar("E", bound=enum.Enum)


class EnumTable(Generic[E]):
    """A client enum and its proto enum, member by member by name (`PREFIX` + member name), so
    a value added to both needs no table here. UNSPECIFIED (0) reads as None."""

    def __init__(self, cls: type[E], proto: Any, prefix: str) -> None:
        names = set(proto.keys())
        self.numbers = {m: proto.Value(prefix + m.name) for m in cls if prefix + m.name in names}
        self.members = {n: m for m, n in self.numbers.items()}
        self.cls = cls

    def number(self, member: E) -> Any:
        """The proto number (Any: each generated enum has its own value type)."""
        return self.numbers[self.cls(member)]

    def member(self, number: int) -> E | None:
        if number == 0:
            return None
        try:
            return self.members[number]
        except KeyError:
            name = self.cls.__name__
            raise ValueError(f"{name}: the server sent {number}, unknown to this client") from None

    def required(self, number: int) -> E:
        found = self.member(number)
        if found is None:
            raise ValueError(f"{self.cls.__name__}: the server sent UNSPECIFIED")
        return found


DIMENSIONS = EnumTable(v.Dimension, pb.Dimension, "DIMENSION_")
SCOPES = EnumTable(v.Scope, pb.Scope, "SCOPE_")
KINDS = EnumTable(v.ScopeBudgetKind, pb.ScopeBudgetKind, "SCOPE_BUDGET_KIND_")
WINDOWS = EnumTable(v.Window, pb.Window, "WINDOW_")
ENFORCEMENTS = EnumTable(v.Enforcement, pb.Enforcement, "ENFORCEMENT_")
ON_EXHAUSTION = EnumTable(v.OnExhaustion, pb.OnExhaustion, "ON_EXHAUSTION_")
STATES = EnumTable(v.RunState, pb.RunState, "RUN_STATE_")
OUTCOMES = EnumTable(v.RunOutcome, pb.RunOutcome, "RUN_OUTCOME_")
MODES = EnumTable(v.ReserveMode, pb.ReserveMode, "RESERVE_MODE_")
RESERVATION_STATES = EnumTable(v.ReservationState, pb.ReservationState, "RESERVATION_STATE_")
EVENT_TYPES = EnumTable(v.RunEventType, pb.RunEventType, "RUN_EVENT_TYPE_")
SPEND_GROUPS = EnumTable(v.SpendGroupBy, pb.SpendGroupBy, "SPEND_GROUP_BY_")


# How many of Run.dimensions are the run's own (tokens, cost, tool calls, retries).
RUN_DIMENSIONS = 4


def datetime_of(value: Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=UTC)


def timestamp_of(value: datetime) -> Timestamp:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone: pass an aware datetime (e.g. UTC)")
    message = Timestamp()
    message.FromDatetime(value)
    return message


def quantity(dimension: v.Dimension, native: int) -> v.Quantity:
    """A native amount (cost in nanos) as the view shows it (cost in Decimal USD)."""
    return v.nanos_to_usd(native) if dimension is v.Dimension.COST else native


def _optional_usd(message: Any, name: str) -> Decimal | None:
    return v.nanos_to_usd(getattr(message, name)) if message.HasField(name) else None


def _optional(message: Any, name: str) -> int | None:
    return int(getattr(message, name)) if message.HasField(name) else None


# ---- to the server ---------------------------------------------------------------------------


def amounts_message(amounts: v.Amounts | pb.Amounts | None) -> pb.Amounts | None:
    if amounts is None or isinstance(amounts, pb.Amounts):
        return amounts
    return pb.Amounts(
        tokens=amounts.tokens,
        cost_nanos=amounts.cost_nanos,
        tool_calls=amounts.tool_calls,
        retries=amounts.retries,
    )


def policy_message(policy: v.Policy | pb.BudgetPolicy | None) -> pb.BudgetPolicy | None:
    if policy is None or isinstance(policy, pb.BudgetPolicy):
        return policy
    message = pb.BudgetPolicy(
        model_deny=list(policy.model_deny),
        on_exhaustion=ON_EXHAUSTION.number(policy.on_exhaustion),
    )
    limits = {
        "max_tokens": policy.max_tokens,
        "max_cost_nanos": None if policy.max_cost is None else v.usd(policy.max_cost),
        "max_tool_calls": policy.max_tool_calls,
        "max_retries": policy.max_retries,
        "threshold_percent": policy.threshold_percent,
    }
    for name, value in limits.items():
        if value is not None:
            setattr(message, name, value)
    if policy.model_allow is not None:
        message.model_allow.CopyFrom(pb.ModelPatterns(patterns=list(policy.model_allow)))
    return message


# ---- from the server -------------------------------------------------------------------------


def amounts(message: pb.Amounts) -> v.Amounts:
    return v.Amounts(message.tokens, message.cost_nanos, message.tool_calls, message.retries)


def dimension_status(message: pb.DimensionStatus) -> v.DimensionStatus:
    d = DIMENSIONS.required(message.dimension)
    return v.DimensionStatus(
        dimension=d,
        limit=quantity(d, message.limit) if message.HasField("limit") else None,
        consumed=quantity(d, message.consumed),
        held=quantity(d, message.held),
        remaining=quantity(d, message.remaining) if message.HasField("remaining") else None,
        binding_scope=SCOPES.member(message.binding_scope) or v.Scope.RUN,
        binding_scope_id=message.binding_scope_id,
        clamped_by=message.clamped_by,
        window_end=datetime_of(message.window_end) if message.HasField("window_end") else None,
    )


def dimension_statuses(messages: Sequence[pb.DimensionStatus]) -> tuple[v.DimensionStatus, ...]:
    return tuple(dimension_status(m) for m in messages)


def effective_budget(message: pb.EffectiveBudget) -> v.EffectiveBudget:
    return v.EffectiveBudget(
        max_tokens=_optional(message, "max_tokens"),
        max_cost=_optional_usd(message, "max_cost_nanos"),
        max_tool_calls=_optional(message, "max_tool_calls"),
        max_retries=_optional(message, "max_retries"),
        threshold_percent=message.threshold_percent,
        on_exhaustion=ON_EXHAUSTION.member(message.on_exhaustion) or v.OnExhaustion.FAIL,
    )


def run(message: pb.Run) -> v.Run:
    return v.Run(
        run_id=message.run_id,
        project_id=message.project_id,
        workflow_id=message.workflow_id,
        agent_id=message.agent_id,
        state=STATES.required(message.state),
        effective_budget=effective_budget(message.effective_budget),
        # The server sends the run's own four dimensions first, then its pools' (budget.proto).
        dimensions=dimension_statuses(message.dimensions[:RUN_DIMENSIONS]),
        pools=dimension_statuses(message.dimensions[RUN_DIMENSIONS:]),
        policy_version=message.policy_version,
        outcome=OUTCOMES.member(message.outcome),
        failure_code=message.failure_code,
        created_at=datetime_of(message.created_at),
        updated_at=datetime_of(message.updated_at),
        advisory=message.advisory,
        advisory_refusals=message.advisory_refusals,
        end_user_id=message.end_user_id,
        api_key_id=message.api_key_id,
        tags=dict(message.tags),
    )


def reservation(message: pb.Reservation) -> v.ReservationInfo:
    return v.ReservationInfo(
        reservation_id=message.reservation_id,
        run_id=message.run_id,
        model=message.model,
        requested=amounts(message.requested),
        granted=amounts(message.granted),
        state=RESERVATION_STATES.required(message.state),
        expires_at=datetime_of(message.expires_at),
        created_at=datetime_of(message.created_at),
    )


def reserve_result(message: pb.ReserveResponse) -> v.ReserveResult:
    return v.ReserveResult(
        reservation(message.reservation),
        dimension_statuses(message.dimensions),
        message.advisory_refusal_reason,
    )


def consume_result(message: pb.ConsumeResponse) -> v.ConsumeResult:
    return v.ConsumeResult(
        overrun=amounts(message.overrun),
        dimensions=dimension_statuses(message.dimensions),
        state=STATES.required(message.state),
        reservation_state=RESERVATION_STATES.member(message.reservation_state),
    )


def close_result(message: pb.CloseRunResponse) -> v.CloseResult:
    return v.CloseResult(run(message.run), message.released_holds)


def check_result(message: pb.CheckResponse) -> v.CheckResult:
    verdict = None
    if message.HasField("model_verdict"):
        m = message.model_verdict
        verdict = v.ModelVerdict(m.allowed, SCOPES.member(m.scope), m.scope_id)
    return v.CheckResult(
        would_grant=message.would_grant,
        refusal_reason=message.refusal_reason,
        state=STATES.required(message.state),
        dimensions=dimension_statuses(message.dimensions),
        model_verdict=verdict,
        advisory_refusal_reason=message.advisory_refusal_reason,
    )


def run_event(message: pb.RunEvent) -> v.RunEvent:
    kind = EVENT_TYPES.member(message.event_type) or v.RunEventType(message.type)
    return v.RunEvent(
        run_id=message.run_id,
        seq=message.seq,
        type=kind,
        created_at=datetime_of(message.created_at),
        payload_json=message.payload_json,
        payload=json.loads(message.payload_json, parse_float=Decimal),
    )


def tenant_event(message: pb.WatchTenantEventsResponse) -> v.TenantEvent:
    if not message.HasField("event"):
        return v.TenantEvent(cursor=message.cursor, event=None)
    return v.TenantEvent(
        cursor=message.cursor,
        event=run_event(message.event),
        project_id=message.project_id,
        workflow_id=message.workflow_id,
        agent_id=message.agent_id,
        pool_scope=SCOPES.member(message.pool_scope),
        pool_scope_id=message.pool_scope_id,
        pool_window_start=(
            datetime_of(message.pool_window_start)
            if message.HasField("pool_window_start")
            else None
        ),
    )


def policy(message: pb.BudgetPolicy) -> v.Policy:
    allow = message.model_allow.patterns if message.HasField("model_allow") else None
    return v.Policy(
        max_tokens=_optional(message, "max_tokens"),
        max_cost=_optional_usd(message, "max_cost_nanos"),
        max_tool_calls=_optional(message, "max_tool_calls"),
        max_retries=_optional(message, "max_retries"),
        model_allow=None if allow is None else tuple(allow),
        model_deny=tuple(message.model_deny),
        threshold_percent=_optional(message, "threshold_percent"),
        on_exhaustion=ON_EXHAUSTION.member(message.on_exhaustion) or v.OnExhaustion.FAIL,
    )


def scope_budget(message: pb.ScopeBudget, balance: pb.PoolBalance | None = None) -> v.ScopeBudget:
    return v.ScopeBudget(
        scope=SCOPES.required(message.scope),
        scope_id=message.scope_id,
        kind=KINDS.required(message.kind),
        policy=policy(message.policy),
        window=WINDOWS.member(message.window) or v.Window.NONE,
        enforcement=ENFORCEMENTS.member(message.enforcement) or v.Enforcement.HARD,
        version=message.version,
        updated_at=datetime_of(message.updated_at),
        model_match=message.model_match,
        max_model_calls=_optional(message, "max_model_calls"),
        balance=None
        if balance is None
        else v.PoolBalance(
            datetime_of(balance.window_start), dimension_statuses(balance.dimensions)
        ),
    )


def get_scope_budget(message: pb.GetScopeBudgetResponse) -> v.ScopeBudget:
    pooled = message.HasField("balance")
    return scope_budget(message.budget, message.balance if pooled else None)


def capabilities(message: pb.GetCapabilitiesResponse) -> v.Capabilities:
    b, limits = message.budget, message.limits
    return v.Capabilities(
        dimensions=tuple(b.dimensions),
        enforcement=ENFORCEMENTS.member(b.enforcement) or v.Enforcement.HARD,
        scope_levels=tuple(SCOPES.required(s) for s in b.scope_levels),
        max_budget_tokens=_optional(limits, "max_budget_tokens"),
        max_budget_cost=_optional_usd(limits, "max_budget_cost_nanos"),
        capabilities_json=message.capabilities_json,
    )


def scope_budget_page(message: pb.ListScopeBudgetsResponse) -> v.ScopeBudgetPage:
    return v.ScopeBudgetPage(
        tuple(scope_budget(b) for b in message.budgets), message.next_page_token
    )


def spend_page(message: pb.ReportSpendResponse) -> v.SpendPage:
    rows = tuple(
        v.SpendRow(
            key=r.key,
            bucket_start=datetime_of(r.bucket_start) if r.HasField("bucket_start") else None,
            cost_nanos=r.cost_nanos,
            tokens=r.tokens,
            tool_calls=r.tool_calls,
            retries=r.retries,
            consume_count=r.consume_count,
        )
        for r in message.rows
    )
    return v.SpendPage(rows, message.next_page_token)
