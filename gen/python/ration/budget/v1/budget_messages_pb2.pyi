import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Dimension(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIMENSION_UNSPECIFIED: _ClassVar[Dimension]
    DIMENSION_TOKENS: _ClassVar[Dimension]
    DIMENSION_COST: _ClassVar[Dimension]
    DIMENSION_TOOL_CALLS: _ClassVar[Dimension]
    DIMENSION_RETRIES: _ClassVar[Dimension]
    DIMENSION_MODEL_CALLS: _ClassVar[Dimension]

class OnExhaustion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ON_EXHAUSTION_UNSPECIFIED: _ClassVar[OnExhaustion]
    ON_EXHAUSTION_FAIL: _ClassVar[OnExhaustion]
    ON_EXHAUSTION_INTERRUPT: _ClassVar[OnExhaustion]

class Scope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_UNSPECIFIED: _ClassVar[Scope]
    SCOPE_RUN: _ClassVar[Scope]
    SCOPE_WORKFLOW: _ClassVar[Scope]
    SCOPE_AGENT: _ClassVar[Scope]
    SCOPE_PROJECT: _ClassVar[Scope]
    SCOPE_END_USER: _ClassVar[Scope]
    SCOPE_API_KEY: _ClassVar[Scope]

class ScopeBudgetKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_BUDGET_KIND_UNSPECIFIED: _ClassVar[ScopeBudgetKind]
    SCOPE_BUDGET_KIND_PER_RUN_CAP: _ClassVar[ScopeBudgetKind]
    SCOPE_BUDGET_KIND_POOLED: _ClassVar[ScopeBudgetKind]

class Window(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WINDOW_UNSPECIFIED: _ClassVar[Window]
    WINDOW_NONE: _ClassVar[Window]
    WINDOW_DAY: _ClassVar[Window]
    WINDOW_WEEK: _ClassVar[Window]
    WINDOW_MONTH: _ClassVar[Window]
    WINDOW_MINUTE: _ClassVar[Window]
    WINDOW_HOUR: _ClassVar[Window]

class Enforcement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENFORCEMENT_UNSPECIFIED: _ClassVar[Enforcement]
    ENFORCEMENT_HARD: _ClassVar[Enforcement]
    ENFORCEMENT_ADVISORY: _ClassVar[Enforcement]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_ACTIVE: _ClassVar[RunState]
    RUN_STATE_INTERRUPTED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_CLOSED: _ClassVar[RunState]

class RunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_OUTCOME_UNSPECIFIED: _ClassVar[RunOutcome]
    RUN_OUTCOME_SUCCEEDED: _ClassVar[RunOutcome]
    RUN_OUTCOME_FAILED: _ClassVar[RunOutcome]
    RUN_OUTCOME_CANCELLED: _ClassVar[RunOutcome]

class ReserveMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVE_MODE_UNSPECIFIED: _ClassVar[ReserveMode]
    RESERVE_MODE_ALL_OR_NOTHING: _ClassVar[ReserveMode]
    RESERVE_MODE_UP_TO: _ClassVar[ReserveMode]

class ReservationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVATION_STATE_UNSPECIFIED: _ClassVar[ReservationState]
    RESERVATION_STATE_OPEN: _ClassVar[ReservationState]
    RESERVATION_STATE_CONSUMED: _ClassVar[ReservationState]
    RESERVATION_STATE_RELEASED: _ClassVar[ReservationState]
    RESERVATION_STATE_EXPIRED: _ClassVar[ReservationState]

class SpendGroupBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPEND_GROUP_BY_UNSPECIFIED: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_PROJECT: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_WORKFLOW: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_AGENT: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_MODEL: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_DAY: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_HOUR: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_END_USER: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_API_KEY: _ClassVar[SpendGroupBy]
    SPEND_GROUP_BY_TAG: _ClassVar[SpendGroupBy]

class RunEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_EVENT_TYPE_UNSPECIFIED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_BUDGET_RESERVED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_BUDGET_CONSUMED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_BUDGET_EXHAUSTED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_CAP_BREACHED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_RUN_FAILED: _ClassVar[RunEventType]
DIMENSION_UNSPECIFIED: Dimension
DIMENSION_TOKENS: Dimension
DIMENSION_COST: Dimension
DIMENSION_TOOL_CALLS: Dimension
DIMENSION_RETRIES: Dimension
DIMENSION_MODEL_CALLS: Dimension
ON_EXHAUSTION_UNSPECIFIED: OnExhaustion
ON_EXHAUSTION_FAIL: OnExhaustion
ON_EXHAUSTION_INTERRUPT: OnExhaustion
SCOPE_UNSPECIFIED: Scope
SCOPE_RUN: Scope
SCOPE_WORKFLOW: Scope
SCOPE_AGENT: Scope
SCOPE_PROJECT: Scope
SCOPE_END_USER: Scope
SCOPE_API_KEY: Scope
SCOPE_BUDGET_KIND_UNSPECIFIED: ScopeBudgetKind
SCOPE_BUDGET_KIND_PER_RUN_CAP: ScopeBudgetKind
SCOPE_BUDGET_KIND_POOLED: ScopeBudgetKind
WINDOW_UNSPECIFIED: Window
WINDOW_NONE: Window
WINDOW_DAY: Window
WINDOW_WEEK: Window
WINDOW_MONTH: Window
WINDOW_MINUTE: Window
WINDOW_HOUR: Window
ENFORCEMENT_UNSPECIFIED: Enforcement
ENFORCEMENT_HARD: Enforcement
ENFORCEMENT_ADVISORY: Enforcement
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_ACTIVE: RunState
RUN_STATE_INTERRUPTED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_CLOSED: RunState
RUN_OUTCOME_UNSPECIFIED: RunOutcome
RUN_OUTCOME_SUCCEEDED: RunOutcome
RUN_OUTCOME_FAILED: RunOutcome
RUN_OUTCOME_CANCELLED: RunOutcome
RESERVE_MODE_UNSPECIFIED: ReserveMode
RESERVE_MODE_ALL_OR_NOTHING: ReserveMode
RESERVE_MODE_UP_TO: ReserveMode
RESERVATION_STATE_UNSPECIFIED: ReservationState
RESERVATION_STATE_OPEN: ReservationState
RESERVATION_STATE_CONSUMED: ReservationState
RESERVATION_STATE_RELEASED: ReservationState
RESERVATION_STATE_EXPIRED: ReservationState
SPEND_GROUP_BY_UNSPECIFIED: SpendGroupBy
SPEND_GROUP_BY_PROJECT: SpendGroupBy
SPEND_GROUP_BY_WORKFLOW: SpendGroupBy
SPEND_GROUP_BY_AGENT: SpendGroupBy
SPEND_GROUP_BY_MODEL: SpendGroupBy
SPEND_GROUP_BY_DAY: SpendGroupBy
SPEND_GROUP_BY_HOUR: SpendGroupBy
SPEND_GROUP_BY_END_USER: SpendGroupBy
SPEND_GROUP_BY_API_KEY: SpendGroupBy
SPEND_GROUP_BY_TAG: SpendGroupBy
RUN_EVENT_TYPE_UNSPECIFIED: RunEventType
RUN_EVENT_TYPE_BUDGET_RESERVED: RunEventType
RUN_EVENT_TYPE_BUDGET_CONSUMED: RunEventType
RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED: RunEventType
RUN_EVENT_TYPE_BUDGET_EXHAUSTED: RunEventType
RUN_EVENT_TYPE_CAP_BREACHED: RunEventType
RUN_EVENT_TYPE_RUN_FAILED: RunEventType

class ModelPatterns(_message.Message):
    __slots__ = ("patterns",)
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    patterns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, patterns: _Optional[_Iterable[str]] = ...) -> None: ...

class BudgetPolicy(_message.Message):
    __slots__ = ("max_tokens", "max_cost_nanos", "max_tool_calls", "max_retries", "model_allow", "model_deny", "threshold_percent", "on_exhaustion")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MODEL_ALLOW_FIELD_NUMBER: _ClassVar[int]
    MODEL_DENY_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PERCENT_FIELD_NUMBER: _ClassVar[int]
    ON_EXHAUSTION_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    max_cost_nanos: int
    max_tool_calls: int
    max_retries: int
    model_allow: ModelPatterns
    model_deny: _containers.RepeatedScalarFieldContainer[str]
    threshold_percent: int
    on_exhaustion: OnExhaustion
    def __init__(self, max_tokens: _Optional[int] = ..., max_cost_nanos: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_retries: _Optional[int] = ..., model_allow: _Optional[_Union[ModelPatterns, _Mapping]] = ..., model_deny: _Optional[_Iterable[str]] = ..., threshold_percent: _Optional[int] = ..., on_exhaustion: _Optional[_Union[OnExhaustion, str]] = ...) -> None: ...

class Amounts(_message.Message):
    __slots__ = ("tokens", "cost_nanos", "tool_calls", "retries")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    cost_nanos: int
    tool_calls: int
    retries: int
    def __init__(self, tokens: _Optional[int] = ..., cost_nanos: _Optional[int] = ..., tool_calls: _Optional[int] = ..., retries: _Optional[int] = ...) -> None: ...

class EffectiveBudget(_message.Message):
    __slots__ = ("max_tokens", "max_cost_nanos", "max_tool_calls", "max_retries", "threshold_percent", "on_exhaustion")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PERCENT_FIELD_NUMBER: _ClassVar[int]
    ON_EXHAUSTION_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    max_cost_nanos: int
    max_tool_calls: int
    max_retries: int
    threshold_percent: int
    on_exhaustion: OnExhaustion
    def __init__(self, max_tokens: _Optional[int] = ..., max_cost_nanos: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_retries: _Optional[int] = ..., threshold_percent: _Optional[int] = ..., on_exhaustion: _Optional[_Union[OnExhaustion, str]] = ...) -> None: ...

class DimensionStatus(_message.Message):
    __slots__ = ("dimension", "limit", "consumed", "held", "remaining", "binding_scope", "binding_scope_id", "clamped_by", "window_end")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    BINDING_SCOPE_FIELD_NUMBER: _ClassVar[int]
    BINDING_SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    CLAMPED_BY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    dimension: Dimension
    limit: int
    consumed: int
    held: int
    remaining: int
    binding_scope: Scope
    binding_scope_id: str
    clamped_by: str
    window_end: _timestamp_pb2.Timestamp
    def __init__(self, dimension: _Optional[_Union[Dimension, str]] = ..., limit: _Optional[int] = ..., consumed: _Optional[int] = ..., held: _Optional[int] = ..., remaining: _Optional[int] = ..., binding_scope: _Optional[_Union[Scope, str]] = ..., binding_scope_id: _Optional[str] = ..., clamped_by: _Optional[str] = ..., window_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "project_id", "workflow_id", "agent_id", "state", "effective_budget", "dimensions", "policy_version", "outcome", "failure_code", "created_at", "updated_at", "advisory", "advisory_refusals", "end_user_id", "api_key_id", "tags")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ADVISORY_FIELD_NUMBER: _ClassVar[int]
    ADVISORY_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    project_id: str
    workflow_id: str
    agent_id: str
    state: RunState
    effective_budget: EffectiveBudget
    dimensions: _containers.RepeatedCompositeFieldContainer[DimensionStatus]
    policy_version: int
    outcome: RunOutcome
    failure_code: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    advisory: bool
    advisory_refusals: int
    end_user_id: str
    api_key_id: str
    tags: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., project_id: _Optional[str] = ..., workflow_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., effective_budget: _Optional[_Union[EffectiveBudget, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[DimensionStatus, _Mapping]]] = ..., policy_version: _Optional[int] = ..., outcome: _Optional[_Union[RunOutcome, str]] = ..., failure_code: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., advisory: _Optional[bool] = ..., advisory_refusals: _Optional[int] = ..., end_user_id: _Optional[str] = ..., api_key_id: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("reservation_id", "run_id", "model", "requested", "granted", "state", "expires_at", "created_at")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    run_id: str
    model: str
    requested: Amounts
    granted: Amounts
    state: ReservationState
    expires_at: _timestamp_pb2.Timestamp
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, reservation_id: _Optional[str] = ..., run_id: _Optional[str] = ..., model: _Optional[str] = ..., requested: _Optional[_Union[Amounts, _Mapping]] = ..., granted: _Optional[_Union[Amounts, _Mapping]] = ..., state: _Optional[_Union[ReservationState, str]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ModelVerdict(_message.Message):
    __slots__ = ("allowed", "scope", "scope_id")
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    scope: Scope
    scope_id: str
    def __init__(self, allowed: _Optional[bool] = ..., scope: _Optional[_Union[Scope, str]] = ..., scope_id: _Optional[str] = ...) -> None: ...

class ScopeBudget(_message.Message):
    __slots__ = ("scope", "scope_id", "kind", "policy", "window", "enforcement", "version", "updated_at", "model_match", "max_model_calls")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ENFORCEMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MODEL_MATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    scope_id: str
    kind: ScopeBudgetKind
    policy: BudgetPolicy
    window: Window
    enforcement: Enforcement
    version: int
    updated_at: _timestamp_pb2.Timestamp
    model_match: str
    max_model_calls: int
    def __init__(self, scope: _Optional[_Union[Scope, str]] = ..., scope_id: _Optional[str] = ..., kind: _Optional[_Union[ScopeBudgetKind, str]] = ..., policy: _Optional[_Union[BudgetPolicy, _Mapping]] = ..., window: _Optional[_Union[Window, str]] = ..., enforcement: _Optional[_Union[Enforcement, str]] = ..., version: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_match: _Optional[str] = ..., max_model_calls: _Optional[int] = ...) -> None: ...

class PoolBalance(_message.Message):
    __slots__ = ("window_start", "dimensions")
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    window_start: _timestamp_pb2.Timestamp
    dimensions: _containers.RepeatedCompositeFieldContainer[DimensionStatus]
    def __init__(self, window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[DimensionStatus, _Mapping]]] = ...) -> None: ...

class SpendFilter(_message.Message):
    __slots__ = ("project_id", "workflow_id", "agent_id", "model", "end_user_id", "api_key_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    END_USER_ID_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    workflow_id: str
    agent_id: str
    model: str
    end_user_id: str
    api_key_id: str
    def __init__(self, project_id: _Optional[str] = ..., workflow_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., model: _Optional[str] = ..., end_user_id: _Optional[str] = ..., api_key_id: _Optional[str] = ...) -> None: ...

class ApiKey(_message.Message):
    __slots__ = ("key_id", "roles", "principal", "created_at", "revoked_at", "has_budget")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_BUDGET_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    principal: str
    created_at: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    has_budget: bool
    def __init__(self, key_id: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., principal: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., has_budget: _Optional[bool] = ...) -> None: ...

class SpendRow(_message.Message):
    __slots__ = ("key", "bucket_start", "cost_nanos", "tokens", "tool_calls", "retries", "consume_count")
    KEY_FIELD_NUMBER: _ClassVar[int]
    BUCKET_START_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_COUNT_FIELD_NUMBER: _ClassVar[int]
    key: str
    bucket_start: _timestamp_pb2.Timestamp
    cost_nanos: int
    tokens: int
    tool_calls: int
    retries: int
    consume_count: int
    def __init__(self, key: _Optional[str] = ..., bucket_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cost_nanos: _Optional[int] = ..., tokens: _Optional[int] = ..., tool_calls: _Optional[int] = ..., retries: _Optional[int] = ..., consume_count: _Optional[int] = ...) -> None: ...

class TenantEventFilter(_message.Message):
    __slots__ = ("event_types", "run_ids", "project_ids")
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    event_types: _containers.RepeatedScalarFieldContainer[RunEventType]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    project_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, event_types: _Optional[_Iterable[_Union[RunEventType, str]]] = ..., run_ids: _Optional[_Iterable[str]] = ..., project_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BudgetReservedPayload(_message.Message):
    __slots__ = ("effective_budget", "scope", "binding_scope")
    EFFECTIVE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    BINDING_SCOPE_FIELD_NUMBER: _ClassVar[int]
    effective_budget: EffectiveBudget
    scope: str
    binding_scope: Scope
    def __init__(self, effective_budget: _Optional[_Union[EffectiveBudget, _Mapping]] = ..., scope: _Optional[str] = ..., binding_scope: _Optional[_Union[Scope, str]] = ...) -> None: ...

class BudgetConsumedPayload(_message.Message):
    __slots__ = ("dimension", "consumed", "limit", "remaining")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    dimension: Dimension
    consumed: int
    limit: int
    remaining: int
    def __init__(self, dimension: _Optional[_Union[Dimension, str]] = ..., consumed: _Optional[int] = ..., limit: _Optional[int] = ..., remaining: _Optional[int] = ...) -> None: ...

class BudgetThresholdCrossedPayload(_message.Message):
    __slots__ = ("dimension", "consumed", "limit", "percent")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    dimension: Dimension
    consumed: int
    limit: int
    percent: int
    def __init__(self, dimension: _Optional[_Union[Dimension, str]] = ..., consumed: _Optional[int] = ..., limit: _Optional[int] = ..., percent: _Optional[int] = ...) -> None: ...

class BudgetExhaustedPayload(_message.Message):
    __slots__ = ("dimension", "consumed", "limit")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    dimension: Dimension
    consumed: int
    limit: int
    def __init__(self, dimension: _Optional[_Union[Dimension, str]] = ..., consumed: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class CapBreachedPayload(_message.Message):
    __slots__ = ("kind", "dimension", "limit", "observed")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    dimension: Dimension
    limit: int
    observed: int
    def __init__(self, kind: _Optional[str] = ..., dimension: _Optional[_Union[Dimension, str]] = ..., limit: _Optional[int] = ..., observed: _Optional[int] = ...) -> None: ...

class RunFailedPayload(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("run_id", "seq", "type", "event_type", "created_at", "payload_json", "budget_reserved", "budget_consumed", "budget_threshold_crossed", "budget_exhausted", "cap_breached", "run_failed")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    BUDGET_RESERVED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_THRESHOLD_CROSSED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    CAP_BREACHED_FIELD_NUMBER: _ClassVar[int]
    RUN_FAILED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    type: str
    event_type: RunEventType
    created_at: _timestamp_pb2.Timestamp
    payload_json: str
    budget_reserved: BudgetReservedPayload
    budget_consumed: BudgetConsumedPayload
    budget_threshold_crossed: BudgetThresholdCrossedPayload
    budget_exhausted: BudgetExhaustedPayload
    cap_breached: CapBreachedPayload
    run_failed: RunFailedPayload
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., type: _Optional[str] = ..., event_type: _Optional[_Union[RunEventType, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload_json: _Optional[str] = ..., budget_reserved: _Optional[_Union[BudgetReservedPayload, _Mapping]] = ..., budget_consumed: _Optional[_Union[BudgetConsumedPayload, _Mapping]] = ..., budget_threshold_crossed: _Optional[_Union[BudgetThresholdCrossedPayload, _Mapping]] = ..., budget_exhausted: _Optional[_Union[BudgetExhaustedPayload, _Mapping]] = ..., cap_breached: _Optional[_Union[CapBreachedPayload, _Mapping]] = ..., run_failed: _Optional[_Union[RunFailedPayload, _Mapping]] = ...) -> None: ...
