import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ration.budget.v1 import budget_messages_pb2 as _budget_messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "project_id", "workflow_id", "agent_id", "policy", "end_user_id", "tags")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    project_id: str
    workflow_id: str
    agent_id: str
    policy: _budget_messages_pb2.BudgetPolicy
    end_user_id: str
    tags: _containers.ScalarMap[str, str]
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., project_id: _Optional[str] = ..., workflow_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., policy: _Optional[_Union[_budget_messages_pb2.BudgetPolicy, _Mapping]] = ..., end_user_id: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ...) -> None: ...

class OpenRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _budget_messages_pb2.Run
    def __init__(self, run: _Optional[_Union[_budget_messages_pb2.Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _budget_messages_pb2.Run
    def __init__(self, run: _Optional[_Union[_budget_messages_pb2.Run, _Mapping]] = ...) -> None: ...

class CloseRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "outcome")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    outcome: _budget_messages_pb2.RunOutcome
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., outcome: _Optional[_Union[_budget_messages_pb2.RunOutcome, str]] = ...) -> None: ...

class CloseRunResponse(_message.Message):
    __slots__ = ("run", "released_holds")
    RUN_FIELD_NUMBER: _ClassVar[int]
    RELEASED_HOLDS_FIELD_NUMBER: _ClassVar[int]
    run: _budget_messages_pb2.Run
    released_holds: int
    def __init__(self, run: _Optional[_Union[_budget_messages_pb2.Run, _Mapping]] = ..., released_holds: _Optional[int] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "delta", "approver")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    delta: _budget_messages_pb2.Amounts
    approver: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., delta: _Optional[_Union[_budget_messages_pb2.Amounts, _Mapping]] = ..., approver: _Optional[str] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _budget_messages_pb2.Run
    def __init__(self, run: _Optional[_Union[_budget_messages_pb2.Run, _Mapping]] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "model", "estimate", "ttl_seconds", "mode")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    model: str
    estimate: _budget_messages_pb2.Amounts
    ttl_seconds: int
    mode: _budget_messages_pb2.ReserveMode
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., model: _Optional[str] = ..., estimate: _Optional[_Union[_budget_messages_pb2.Amounts, _Mapping]] = ..., ttl_seconds: _Optional[int] = ..., mode: _Optional[_Union[_budget_messages_pb2.ReserveMode, str]] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("reservation", "dimensions", "advisory_refusal_reason")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    ADVISORY_REFUSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    reservation: _budget_messages_pb2.Reservation
    dimensions: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.DimensionStatus]
    advisory_refusal_reason: str
    def __init__(self, reservation: _Optional[_Union[_budget_messages_pb2.Reservation, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[_budget_messages_pb2.DimensionStatus, _Mapping]]] = ..., advisory_refusal_reason: _Optional[str] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "reservation_id", "model", "usage")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reservation_id: str
    model: str
    usage: _budget_messages_pb2.Amounts
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reservation_id: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[_budget_messages_pb2.Amounts, _Mapping]] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ("overrun", "dimensions", "state", "reservation_state")
    OVERRUN_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_STATE_FIELD_NUMBER: _ClassVar[int]
    overrun: _budget_messages_pb2.Amounts
    dimensions: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.DimensionStatus]
    state: _budget_messages_pb2.RunState
    reservation_state: _budget_messages_pb2.ReservationState
    def __init__(self, overrun: _Optional[_Union[_budget_messages_pb2.Amounts, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[_budget_messages_pb2.DimensionStatus, _Mapping]]] = ..., state: _Optional[_Union[_budget_messages_pb2.RunState, str]] = ..., reservation_state: _Optional[_Union[_budget_messages_pb2.ReservationState, str]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "reservation_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reservation_id: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reservation_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("reservation",)
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    reservation: _budget_messages_pb2.Reservation
    def __init__(self, reservation: _Optional[_Union[_budget_messages_pb2.Reservation, _Mapping]] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("run_id", "estimate", "model")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    estimate: _budget_messages_pb2.Amounts
    model: str
    def __init__(self, run_id: _Optional[str] = ..., estimate: _Optional[_Union[_budget_messages_pb2.Amounts, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("would_grant", "refusal_reason", "state", "dimensions", "model_verdict", "advisory_refusal_reason")
    WOULD_GRANT_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERDICT_FIELD_NUMBER: _ClassVar[int]
    ADVISORY_REFUSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    would_grant: bool
    refusal_reason: str
    state: _budget_messages_pb2.RunState
    dimensions: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.DimensionStatus]
    model_verdict: _budget_messages_pb2.ModelVerdict
    advisory_refusal_reason: str
    def __init__(self, would_grant: _Optional[bool] = ..., refusal_reason: _Optional[str] = ..., state: _Optional[_Union[_budget_messages_pb2.RunState, str]] = ..., dimensions: _Optional[_Iterable[_Union[_budget_messages_pb2.DimensionStatus, _Mapping]]] = ..., model_verdict: _Optional[_Union[_budget_messages_pb2.ModelVerdict, _Mapping]] = ..., advisory_refusal_reason: _Optional[str] = ...) -> None: ...

class ListRunEventsRequest(_message.Message):
    __slots__ = ("run_id", "after_seq", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.RunEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_budget_messages_pb2.RunEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchRunEventsRequest(_message.Message):
    __slots__ = ("run_id", "after_seq")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class WatchRunEventsResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _budget_messages_pb2.RunEvent
    def __init__(self, event: _Optional[_Union[_budget_messages_pb2.RunEvent, _Mapping]] = ...) -> None: ...

class WatchTenantEventsRequest(_message.Message):
    __slots__ = ("after_cursor", "filter", "start_at_latest")
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    START_AT_LATEST_FIELD_NUMBER: _ClassVar[int]
    after_cursor: str
    filter: _budget_messages_pb2.TenantEventFilter
    start_at_latest: bool
    def __init__(self, after_cursor: _Optional[str] = ..., filter: _Optional[_Union[_budget_messages_pb2.TenantEventFilter, _Mapping]] = ..., start_at_latest: _Optional[bool] = ...) -> None: ...

class WatchTenantEventsResponse(_message.Message):
    __slots__ = ("event", "cursor", "project_id", "workflow_id", "agent_id", "pool_scope", "pool_scope_id", "pool_window_start")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_SCOPE_FIELD_NUMBER: _ClassVar[int]
    POOL_SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    event: _budget_messages_pb2.RunEvent
    cursor: str
    project_id: str
    workflow_id: str
    agent_id: str
    pool_scope: _budget_messages_pb2.Scope
    pool_scope_id: str
    pool_window_start: _timestamp_pb2.Timestamp
    def __init__(self, event: _Optional[_Union[_budget_messages_pb2.RunEvent, _Mapping]] = ..., cursor: _Optional[str] = ..., project_id: _Optional[str] = ..., workflow_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., pool_scope: _Optional[_Union[_budget_messages_pb2.Scope, str]] = ..., pool_scope_id: _Optional[str] = ..., pool_window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PutScopeBudgetRequest(_message.Message):
    __slots__ = ("request_id", "budget")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    budget: _budget_messages_pb2.ScopeBudget
    def __init__(self, request_id: _Optional[str] = ..., budget: _Optional[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]] = ...) -> None: ...

class PutScopeBudgetResponse(_message.Message):
    __slots__ = ("budget",)
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    budget: _budget_messages_pb2.ScopeBudget
    def __init__(self, budget: _Optional[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]] = ...) -> None: ...

class GetScopeBudgetRequest(_message.Message):
    __slots__ = ("scope", "scope_id", "kind")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    scope: _budget_messages_pb2.Scope
    scope_id: str
    kind: _budget_messages_pb2.ScopeBudgetKind
    def __init__(self, scope: _Optional[_Union[_budget_messages_pb2.Scope, str]] = ..., scope_id: _Optional[str] = ..., kind: _Optional[_Union[_budget_messages_pb2.ScopeBudgetKind, str]] = ...) -> None: ...

class GetScopeBudgetResponse(_message.Message):
    __slots__ = ("budget", "balance")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    budget: _budget_messages_pb2.ScopeBudget
    balance: _budget_messages_pb2.PoolBalance
    def __init__(self, budget: _Optional[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]] = ..., balance: _Optional[_Union[_budget_messages_pb2.PoolBalance, _Mapping]] = ...) -> None: ...

class DeleteScopeBudgetRequest(_message.Message):
    __slots__ = ("request_id", "scope", "scope_id", "kind")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    scope: _budget_messages_pb2.Scope
    scope_id: str
    kind: _budget_messages_pb2.ScopeBudgetKind
    def __init__(self, request_id: _Optional[str] = ..., scope: _Optional[_Union[_budget_messages_pb2.Scope, str]] = ..., scope_id: _Optional[str] = ..., kind: _Optional[_Union[_budget_messages_pb2.ScopeBudgetKind, str]] = ...) -> None: ...

class DeleteScopeBudgetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BudgetCapability(_message.Message):
    __slots__ = ("supported", "dimensions", "enforce", "scopes", "enforcement", "scope_levels")
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    ENFORCE_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    ENFORCEMENT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_LEVELS_FIELD_NUMBER: _ClassVar[int]
    supported: bool
    dimensions: _containers.RepeatedScalarFieldContainer[str]
    enforce: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    enforcement: _budget_messages_pb2.Enforcement
    scope_levels: _containers.RepeatedScalarFieldContainer[_budget_messages_pb2.Scope]
    def __init__(self, supported: _Optional[bool] = ..., dimensions: _Optional[_Iterable[str]] = ..., enforce: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., enforcement: _Optional[_Union[_budget_messages_pb2.Enforcement, str]] = ..., scope_levels: _Optional[_Iterable[_Union[_budget_messages_pb2.Scope, str]]] = ...) -> None: ...

class BudgetLimits(_message.Message):
    __slots__ = ("max_budget_tokens", "max_budget_cost_nanos")
    MAX_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_BUDGET_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    max_budget_tokens: int
    max_budget_cost_nanos: int
    def __init__(self, max_budget_tokens: _Optional[int] = ..., max_budget_cost_nanos: _Optional[int] = ...) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("budget", "limits", "capabilities_json")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_JSON_FIELD_NUMBER: _ClassVar[int]
    budget: BudgetCapability
    limits: BudgetLimits
    capabilities_json: str
    def __init__(self, budget: _Optional[_Union[BudgetCapability, _Mapping]] = ..., limits: _Optional[_Union[BudgetLimits, _Mapping]] = ..., capabilities_json: _Optional[str] = ...) -> None: ...

class ReportSpendRequest(_message.Message):
    __slots__ = ("start_time", "end_time", "group_by", "filter", "page_size", "page_token", "group_by_tag_key")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_TAG_KEY_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    group_by: _budget_messages_pb2.SpendGroupBy
    filter: _budget_messages_pb2.SpendFilter
    page_size: int
    page_token: str
    group_by_tag_key: str
    def __init__(self, start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., group_by: _Optional[_Union[_budget_messages_pb2.SpendGroupBy, str]] = ..., filter: _Optional[_Union[_budget_messages_pb2.SpendFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., group_by_tag_key: _Optional[str] = ...) -> None: ...

class ReportSpendResponse(_message.Message):
    __slots__ = ("rows", "next_page_token")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.SpendRow]
    next_page_token: str
    def __init__(self, rows: _Optional[_Iterable[_Union[_budget_messages_pb2.SpendRow, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListScopeBudgetsRequest(_message.Message):
    __slots__ = ("scope", "kind", "window", "page_size", "page_token")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: _budget_messages_pb2.Scope
    kind: _budget_messages_pb2.ScopeBudgetKind
    window: _budget_messages_pb2.Window
    page_size: int
    page_token: str
    def __init__(self, scope: _Optional[_Union[_budget_messages_pb2.Scope, str]] = ..., kind: _Optional[_Union[_budget_messages_pb2.ScopeBudgetKind, str]] = ..., window: _Optional[_Union[_budget_messages_pb2.Window, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListScopeBudgetsResponse(_message.Message):
    __slots__ = ("budgets", "next_page_token")
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.ScopeBudget]
    next_page_token: str
    def __init__(self, budgets: _Optional[_Iterable[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("request_id", "roles", "principal", "budget")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    principal: str
    budget: _budget_messages_pb2.ScopeBudget
    def __init__(self, request_id: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., principal: _Optional[str] = ..., budget: _Optional[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("key", "secret", "budget")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    key: _budget_messages_pb2.ApiKey
    secret: str
    budget: _budget_messages_pb2.ScopeBudget
    def __init__(self, key: _Optional[_Union[_budget_messages_pb2.ApiKey, _Mapping]] = ..., secret: _Optional[str] = ..., budget: _Optional[_Union[_budget_messages_pb2.ScopeBudget, _Mapping]] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "include_revoked")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REVOKED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    include_revoked: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_revoked: _Optional[bool] = ...) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[_budget_messages_pb2.ApiKey]
    next_page_token: str
    def __init__(self, keys: _Optional[_Iterable[_Union[_budget_messages_pb2.ApiKey, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RotateApiKeyRequest(_message.Message):
    __slots__ = ("request_id", "key_id", "overlap_seconds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    key_id: str
    overlap_seconds: int
    def __init__(self, request_id: _Optional[str] = ..., key_id: _Optional[str] = ..., overlap_seconds: _Optional[int] = ...) -> None: ...

class RotateApiKeyResponse(_message.Message):
    __slots__ = ("key", "secret", "previous_valid_until")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VALID_UNTIL_FIELD_NUMBER: _ClassVar[int]
    key: _budget_messages_pb2.ApiKey
    secret: str
    previous_valid_until: _timestamp_pb2.Timestamp
    def __init__(self, key: _Optional[_Union[_budget_messages_pb2.ApiKey, _Mapping]] = ..., secret: _Optional[str] = ..., previous_valid_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("request_id", "key_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    key_id: str
    def __init__(self, request_id: _Optional[str] = ..., key_id: _Optional[str] = ...) -> None: ...

class RevokeApiKeyResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: _budget_messages_pb2.ApiKey
    def __init__(self, key: _Optional[_Union[_budget_messages_pb2.ApiKey, _Mapping]] = ...) -> None: ...
