"""Protobuf requests to budget commands, validated: every bad field is one violation."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from budget_service.domain import commands as cmd
from budget_service.domain import events as ev
from budget_service.domain import input_rules as v
from budget_service.domain.policy import (
    BudgetPolicy,
    Dimension,
    Enforcement,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)
from budget_service.domain.run_state import ReserveMode, RunOutcome
from budget_service.domain.spend import (
    SpendFilter,
    SpendGroupBy,
    SpendQuery,
    bucket_start,
    validate_filter,
    validate_tag_key,
    validate_window,
)
from budget_service.domain.tenant_events import (
    MAX_FILTER_TYPES,
    Position,
    TenantEventFilter,
    parse_cursor,
)
from budget_service.domain.tenant_events import validate_filter as validate_tenant_filter
from ration.budget.v1 import budget_pb2 as pb
from servicekit.errors import FieldViolation, validation_error
from servicekit.timestamps import timestamp_violation, to_datetime

E = TypeVar("E")

# Proto enum numbers to domain values; UNSPECIFIED maps to the documented default, or is absent
# where the field is required. Proto3 enums are open: unknown numbers arrive and are refused.
SCOPES = {
    pb.SCOPE_WORKFLOW: Scope.WORKFLOW,
    pb.SCOPE_AGENT: Scope.AGENT,
    pb.SCOPE_PROJECT: Scope.PROJECT,
    pb.SCOPE_RUN: Scope.RUN,
    pb.SCOPE_END_USER: Scope.END_USER,
    pb.SCOPE_API_KEY: Scope.API_KEY,
}
KINDS = {
    pb.SCOPE_BUDGET_KIND_PER_RUN_CAP: ScopeBudgetKind.PER_RUN,
    pb.SCOPE_BUDGET_KIND_POOLED: ScopeBudgetKind.POOLED,
}
WINDOWS = {
    pb.WINDOW_UNSPECIFIED: Window.NONE,
    pb.WINDOW_NONE: Window.NONE,
    pb.WINDOW_DAY: Window.DAY,
    pb.WINDOW_WEEK: Window.WEEK,
    pb.WINDOW_MONTH: Window.MONTH,
    pb.WINDOW_MINUTE: Window.MINUTE,
    pb.WINDOW_HOUR: Window.HOUR,
}
ENFORCEMENTS = {
    pb.ENFORCEMENT_UNSPECIFIED: Enforcement.HARD,
    pb.ENFORCEMENT_HARD: Enforcement.HARD,
    pb.ENFORCEMENT_ADVISORY: Enforcement.ADVISORY,
}
ON_EXHAUSTION = {
    pb.ON_EXHAUSTION_UNSPECIFIED: OnExhaustion.FAIL,
    pb.ON_EXHAUSTION_FAIL: OnExhaustion.FAIL,
    pb.ON_EXHAUSTION_INTERRUPT: OnExhaustion.INTERRUPT,
}
MODES = {
    pb.RESERVE_MODE_UNSPECIFIED: ReserveMode.ALL_OR_NOTHING,
    pb.RESERVE_MODE_ALL_OR_NOTHING: ReserveMode.ALL_OR_NOTHING,
    pb.RESERVE_MODE_UP_TO: ReserveMode.UP_TO,
}
OUTCOMES = {
    pb.RUN_OUTCOME_SUCCEEDED: RunOutcome.SUCCEEDED,
    pb.RUN_OUTCOME_FAILED: RunOutcome.FAILED,
    pb.RUN_OUTCOME_CANCELLED: RunOutcome.CANCELLED,
}
SPEND_GROUPS = {
    pb.SPEND_GROUP_BY_PROJECT: SpendGroupBy.PROJECT,
    pb.SPEND_GROUP_BY_WORKFLOW: SpendGroupBy.WORKFLOW,
    pb.SPEND_GROUP_BY_AGENT: SpendGroupBy.AGENT,
    pb.SPEND_GROUP_BY_MODEL: SpendGroupBy.MODEL,
    pb.SPEND_GROUP_BY_DAY: SpendGroupBy.DAY,
    pb.SPEND_GROUP_BY_HOUR: SpendGroupBy.HOUR,
    pb.SPEND_GROUP_BY_END_USER: SpendGroupBy.END_USER,
    pb.SPEND_GROUP_BY_API_KEY: SpendGroupBy.API_KEY,
    pb.SPEND_GROUP_BY_TAG: SpendGroupBy.TAG,
}
EVENT_TYPE_NAMES = {
    pb.RUN_EVENT_TYPE_BUDGET_RESERVED: ev.BudgetReserved.event_type,
    pb.RUN_EVENT_TYPE_BUDGET_CONSUMED: ev.BudgetConsumed.event_type,
    pb.RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED: ev.ThresholdCrossed.event_type,
    pb.RUN_EVENT_TYPE_BUDGET_EXHAUSTED: ev.BudgetExhausted.event_type,
    pb.RUN_EVENT_TYPE_CAP_BREACHED: ev.CapBreached.event_type,
    pb.RUN_EVENT_TYPE_RUN_FAILED: ev.RunFailed.event_type,
}
DEFAULT_PAGE_SIZE = 100


class Violations(list[FieldViolation]):
    def enum(self, value: int, table: Mapping[Any, E], path: str, fallback: E) -> E:
        if value not in table:
            what = "is required" if value == 0 else f"has no value {value}"
            self.append(FieldViolation(path, what))
            return fallback
        return table[value]

    def check(self) -> None:
        if self:
            raise validation_error(self)


def mutation_of(method: str, request: Any, found: Violations) -> cmd.Mutation:
    found += v.validate_request_id(request.request_id)
    payload = request.SerializeToString(deterministic=True)
    return cmd.Mutation(method, request.request_id, payload)


_AMOUNT_FIELDS = tuple((d, d.field_name) for d in Dimension)


def _amounts(message: pb.Amounts, path: str, found: Violations) -> dict[Dimension, int]:
    values = {d: getattr(message, name) for d, name in _AMOUNT_FIELDS}
    found += v.validate_amounts(values, path)
    return values


def _policy(message: pb.BudgetPolicy, path: str, found: Violations) -> BudgetPolicy:
    def optional(name: str) -> int | None:
        return getattr(message, name) if message.HasField(name) else None

    on_exhaustion = found.enum(
        message.on_exhaustion, ON_EXHAUSTION, f"{path}.on_exhaustion", OnExhaustion.FAIL
    )
    policy = BudgetPolicy(
        max_tokens=optional("max_tokens"),
        max_cost_nanos=optional("max_cost_nanos"),
        max_tool_calls=optional("max_tool_calls"),
        max_retries=optional("max_retries"),
        model_allow=tuple(message.model_allow.patterns)
        if message.HasField("model_allow")
        else None,
        model_deny=tuple(message.model_deny),
        threshold_percent=optional("threshold_percent"),
        on_exhaustion=on_exhaustion,
    )
    allow = f"{path}.model_allow"
    for violation in v.validate_policy(policy, path):
        # The domain names the allow list itself; on the wire it is wrapped in `patterns`.
        name = violation.field.replace(allow, f"{allow}.patterns", 1)
        found.append(FieldViolation(name, violation.description))
    return policy


def open_run(request: pb.OpenRunRequest, api_key_id: str = "") -> tuple[cmd.Mutation, cmd.OpenRun]:
    """`api_key_id`: the issued key the caller authenticated with (never from the request)."""
    found = Violations()
    mutation = mutation_of("OpenRun", request, found)
    found += v.validate_run_id(request.run_id)
    found += v.validate_id(request.project_id, "project_id")
    found += v.validate_optional_id(request.workflow_id, "workflow_id")
    found += v.validate_optional_id(request.agent_id, "agent_id")
    found += v.validate_optional_id(request.end_user_id, "end_user_id")
    tags = dict(request.tags)
    found += v.validate_tags(tags)
    policy = _policy(request.policy, "policy", found)
    found.check()
    return mutation, cmd.OpenRun(
        request.run_id,
        request.project_id,
        request.workflow_id,
        request.agent_id,
        policy,
        end_user_id=request.end_user_id,
        tags=tuple(sorted(tags.items())),
        api_key_id=api_key_id,
    )


def run_id(request: Any) -> str:
    found = Violations(v.validate_run_id(request.run_id))
    found.check()
    return str(request.run_id)


def close_run(request: pb.CloseRunRequest) -> tuple[cmd.Mutation, cmd.CloseRun]:
    found = Violations()
    mutation = mutation_of("CloseRun", request, found)
    found += v.validate_run_id(request.run_id)
    outcome = found.enum(request.outcome, OUTCOMES, "outcome", RunOutcome.SUCCEEDED)
    found.check()
    return mutation, cmd.CloseRun(request.run_id, outcome)


def resume_run(request: pb.ResumeRunRequest, principal: str) -> tuple[cmd.Mutation, cmd.ResumeRun]:
    """`principal` (the authenticated caller) is the approver; the request's `approver` text
    is kept as a note, redacted, and the request is fingerprinted with the redacted note, so
    nothing derived from a secret in it is stored."""
    found = Violations()
    note_violations = v.validate_note(request.approver, "approver")
    note = request.approver if note_violations else v.stored_note(request.approver)
    kept = pb.ResumeRunRequest()
    kept.CopyFrom(request)
    kept.approver = note
    mutation = mutation_of("ResumeRun", kept, found)
    found += v.validate_run_id(request.run_id)
    delta = _amounts(request.delta, "delta", found)
    found += note_violations
    found.check()
    return mutation, cmd.ResumeRun(request.run_id, delta, principal, note)


def _model(model: str, amounts: Mapping[Dimension, int]) -> list[FieldViolation]:
    """A model call (tokens or cost) names its model; a tool call or retry may leave it empty,
    and then no model policy applies to it."""
    if not model and not (amounts.get(Dimension.TOKENS) or amounts.get(Dimension.COST)):
        return []
    return v.validate_model_id(model)


def reserve(request: pb.ReserveRequest, max_ttl_seconds: int) -> tuple[cmd.Mutation, cmd.Reserve]:
    found = Violations()
    mutation = mutation_of("Reserve", request, found)
    found += v.validate_run_id(request.run_id)
    estimate = _amounts(request.estimate, "estimate", found)
    found += _model(request.model, estimate)
    if all(amount == 0 for amount in estimate.values()):
        found.append(FieldViolation("estimate", "must ask for at least one dimension"))
    found += v.validate_ttl(request.ttl_seconds, max_ttl_seconds)
    mode = found.enum(request.mode, MODES, "mode", ReserveMode.ALL_OR_NOTHING)
    found.check()
    return mutation, cmd.Reserve(request.run_id, request.model, estimate, request.ttl_seconds, mode)


def consume(request: pb.ConsumeRequest) -> tuple[cmd.Mutation, cmd.Consume]:
    found = Violations()
    mutation = mutation_of("Consume", request, found)
    found += v.validate_run_id(request.run_id)
    found += v.validate_optional_id(request.reservation_id, "reservation_id")
    usage = _amounts(request.usage, "usage", found)
    found += _model(request.model, usage)
    found.check()
    return mutation, cmd.Consume(request.run_id, request.reservation_id, request.model, usage)


def release(request: pb.ReleaseRequest) -> tuple[cmd.Mutation, cmd.Release]:
    found = Violations()
    mutation = mutation_of("Release", request, found)
    found += v.validate_run_id(request.run_id)
    found += v.validate_id(request.reservation_id, "reservation_id")
    found.check()
    return mutation, cmd.Release(request.run_id, request.reservation_id)


def check(request: pb.CheckRequest) -> cmd.Check:
    found = Violations(v.validate_run_id(request.run_id))
    estimate = _amounts(request.estimate, "estimate", found)
    if request.model:
        found += v.validate_model_id(request.model)
    found.check()
    return cmd.Check(request.run_id, estimate, request.model)


def page_token(run: str, after_seq: int) -> str:
    return base64.urlsafe_b64encode(f"{run}\n{after_seq}".encode()).decode()


def list_events(request: pb.ListRunEventsRequest) -> tuple[str, int, int]:
    """run_id, after_seq and page size; a page_token (of this run) overrides after_seq."""
    found = Violations(v.validate_run_id(request.run_id))
    found += v.validate_page(request.after_seq, request.page_size)
    after_seq = request.after_seq
    if request.page_token:
        try:
            run, seq = base64.urlsafe_b64decode(request.page_token.encode()).decode().split("\n")
            after_seq = int(seq)
            if run != request.run_id or after_seq < 0:
                raise ValueError(run)
        except ValueError:  # also binascii.Error and UnicodeDecodeError
            found.append(FieldViolation("page_token", "is not a page token of this run"))
    found.check()
    return request.run_id, after_seq, request.page_size or DEFAULT_PAGE_SIZE


def watch(request: pb.WatchRunEventsRequest) -> tuple[str, int]:
    found = Violations(v.validate_run_id(request.run_id))
    found += v.validate_page(request.after_seq, 0)
    found.check()
    return request.run_id, request.after_seq


def watch_tenant(
    request: pb.WatchTenantEventsRequest,
) -> tuple[Position | None, TenantEventFilter]:
    """Where the stream starts (None: after the latest event) and what it sends."""
    found = Violations()
    after = parse_cursor(request.after_cursor)
    if not isinstance(after, Position):
        found.append(after)
    elif request.start_at_latest and request.after_cursor:
        found.append(FieldViolation("start_at_latest", "cannot be set with an after_cursor"))
    message = request.filter
    numbers = list(message.event_types)
    if len(numbers) > MAX_FILTER_TYPES:
        found.append(
            FieldViolation("filter.event_types", f"must have at most {MAX_FILTER_TYPES} entries")
        )
        numbers = []
    types = []
    for i, number in enumerate(numbers):
        if number in EVENT_TYPE_NAMES:
            types.append(EVENT_TYPE_NAMES[number])
        else:
            found.append(FieldViolation(f"filter.event_types[{i}]", "is not an event type"))
    wanted = TenantEventFilter(tuple(types), tuple(message.run_ids), tuple(message.project_ids))
    found += validate_tenant_filter(wanted)
    found.check()
    assert isinstance(after, Position)  # else found.check() raised
    return (None if request.start_at_latest else after), wanted


def scope_budget(request: pb.PutScopeBudgetRequest) -> tuple[cmd.Mutation, ScopeBudget]:
    found = Violations()
    mutation = mutation_of("PutScopeBudget", request, found)
    budget = scope_budget_of(request.budget, found)
    found.check()
    return mutation, budget


def scope_budget_of(
    message: pb.ScopeBudget, found: Violations, scope_id: str | None = None
) -> ScopeBudget:
    """A ScopeBudget message (at field `budget`), its violations added to `found`; with
    `scope_id`, an API key's budget: scope API_KEY of that id, kind POOLED unless given."""
    if scope_id is None:
        scope = found.enum(message.scope, SCOPES, "budget.scope", Scope.PROJECT)
        kind = found.enum(message.kind, KINDS, "budget.kind", ScopeBudgetKind.PER_RUN)
    else:
        scope = Scope.API_KEY
        kind = found.enum(
            message.kind or pb.SCOPE_BUDGET_KIND_POOLED,
            KINDS,
            "budget.kind",
            ScopeBudgetKind.POOLED,
        )
    window = found.enum(message.window, WINDOWS, "budget.window", Window.NONE)
    enforcement = found.enum(
        message.enforcement, ENFORCEMENTS, "budget.enforcement", Enforcement.HARD
    )
    policy = _policy(message.policy, "budget.policy", found)
    max_model_calls = message.max_model_calls if message.HasField("max_model_calls") else None
    budget = ScopeBudget(
        scope,
        message.scope_id if scope_id is None else scope_id,
        kind,
        policy,
        window,
        enforcement,
        message.model_match,
        max_model_calls,
    )
    # The policy was validated above; validate the scope parts only.
    found += [
        f
        for f in v.validate_scope_budget(budget, "budget")
        if not f.field.startswith("budget.policy.")
    ]
    return budget


def scope_key(request: Any, mutating: bool) -> tuple[cmd.Mutation | None, cmd.ScopeKey]:
    """Get and Delete name a scope budget by scope, scope_id and kind."""
    found = Violations()
    mutation = mutation_of("DeleteScopeBudget", request, found) if mutating else None
    scope = found.enum(request.scope, SCOPES, "scope", Scope.PROJECT)
    if scope is Scope.RUN:
        found.append(FieldViolation("scope", f"must be {v.SCOPE_NAMES}"))
    found += v.validate_id(request.scope_id, "scope_id")
    kind = found.enum(request.kind, KINDS, "kind", ScopeBudgetKind.PER_RUN)
    found.check()
    return mutation, cmd.ScopeKey(scope, request.scope_id, kind)


def _list_digest(query: cmd.ScopeBudgetQuery) -> str:
    """What a scope-budget page token is bound to: the filter (not page_size)."""
    parts = [getattr(x, "value", None) for x in (query.scope, query.kind, query.window)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def scope_budgets_page_token(query: cmd.ScopeBudgetQuery, after: cmd.ScopeBudgetSortKey) -> str:
    key = [after.scope, after.scope_id, after.kind]
    document = json.dumps({"q": _list_digest(query), "k": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode()


def _scope_budgets_after(
    token: str, query: cmd.ScopeBudgetQuery, found: Violations
) -> cmd.ScopeBudgetSortKey | None:
    if not token:
        return None
    try:
        document = json.loads(base64.urlsafe_b64decode(token.encode()))
        key = document["k"]
        if document["q"] != _list_digest(query) or not (
            isinstance(key, list) and len(key) == 3 and all(isinstance(k, str) for k in key)
        ):
            raise ValueError(token)
        return cmd.ScopeBudgetSortKey(*key)
    except (ValueError, TypeError, KeyError):  # also binascii.Error and UnicodeDecodeError
        found.append(FieldViolation("page_token", "is not a page token of this listing"))
        return None


def list_scope_budgets(
    request: pb.ListScopeBudgetsRequest,
) -> tuple[cmd.ScopeBudgetQuery, cmd.ScopeBudgetSortKey | None, int]:
    """The filter, the last key of the previous page (None for the first) and the page size."""
    found = Violations()
    scope = None
    if request.scope:
        scope = found.enum(request.scope, SCOPES, "scope", Scope.PROJECT)
        if scope is Scope.RUN:
            found.append(FieldViolation("scope", "RUN has no scope budgets"))
    kind = found.enum(request.kind, KINDS, "kind", ScopeBudgetKind.POOLED) if request.kind else None
    window = found.enum(request.window, WINDOWS, "window", Window.NONE) if request.window else None
    found += v.check_int(request.page_size, "page_size", 0, v.MAX_PAGE_SIZE)
    query = cmd.ScopeBudgetQuery(scope, kind, window)
    after = _scope_budgets_after(request.page_token, query, found)
    found.check()
    return query, after, request.page_size or DEFAULT_PAGE_SIZE


def _instant(request: pb.ReportSpendRequest, name: str, found: Violations) -> datetime | None:
    if not request.HasField(name):
        found.append(FieldViolation(name, "is required"))
        return None
    value = getattr(request, name)
    violation = timestamp_violation(value, name)
    if violation is not None:
        found.append(violation)
        return None
    return to_datetime(value)


def _query_digest(query: SpendQuery) -> str:
    """What a spend page token is bound to: the window, grouping and filter (not page_size)."""
    f = query.filter
    parts = [query.start.isoformat(), query.end.isoformat(), query.group_by.value]
    parts += [f.project_id, f.workflow_id, f.agent_id, f.model]
    if f.end_user_id or f.api_key_id or query.tag_key:  # earlier tokens stay valid
        parts += [f.end_user_id, f.api_key_id, query.tag_key]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def spend_page_token(query: SpendQuery, after_key: str) -> str:
    document = json.dumps({"q": _query_digest(query), "k": after_key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode()


def _after_key(token: str, query: SpendQuery, found: Violations) -> str | None:
    if not token:
        return None
    try:
        document = json.loads(base64.urlsafe_b64decode(token.encode()))
        key = document["k"]
        if document["q"] != _query_digest(query) or not isinstance(key, str):
            raise ValueError(token)
        if query.group_by.is_time:
            bucket_start(key)  # a DAY or HOUR page resumes after a bucket
        return key
    except (ValueError, TypeError, KeyError):  # also binascii.Error and UnicodeDecodeError
        found.append(FieldViolation("page_token", "is not a page token of this report"))
        return None


def report_spend(request: pb.ReportSpendRequest) -> tuple[SpendQuery, str | None, int]:
    """The query, the last key of the previous page (None for the first) and the page size."""
    found = Violations()
    start = _instant(request, "start_time", found)
    end = _instant(request, "end_time", found)
    if start is not None and end is not None:
        found += validate_window(start, end)
    group_by = found.enum(request.group_by, SPEND_GROUPS, "group_by", SpendGroupBy.PROJECT)
    message = request.filter
    spend_filter = SpendFilter(
        message.project_id,
        message.workflow_id,
        message.agent_id,
        message.model,
        message.end_user_id,
        message.api_key_id,
    )
    found += validate_filter(spend_filter)
    found += validate_tag_key(group_by, request.group_by_tag_key)
    found += v.check_int(request.page_size, "page_size", 0, v.MAX_PAGE_SIZE)
    found.check()
    assert start is not None  # else found.check() raised
    assert end is not None
    query = SpendQuery(start, end, group_by, spend_filter, request.group_by_tag_key)
    after_key = _after_key(request.page_token, query, found)
    found.check()
    return query, after_key, request.page_size or DEFAULT_PAGE_SIZE
