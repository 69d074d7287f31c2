from ration.memory.v1 import memory_messages_pb2 as _memory_messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendEntriesRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "entries", "expected_revision", "secrets")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    entries: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.EntryInput]
    expected_revision: int
    secrets: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Secret]
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[_memory_messages_pb2.EntryInput, _Mapping]]] = ..., expected_revision: _Optional[int] = ..., secrets: _Optional[_Iterable[_Union[_memory_messages_pb2.Secret, _Mapping]]] = ...) -> None: ...

class AppendEntriesResponse(_message.Message):
    __slots__ = ("result", "entries", "redactions")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REDACTIONS_FIELD_NUMBER: _ClassVar[int]
    result: _memory_messages_pb2.WriteResult
    entries: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.EntryVersion]
    redactions: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.RedactionCount]
    def __init__(self, result: _Optional[_Union[_memory_messages_pb2.WriteResult, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[_memory_messages_pb2.EntryVersion, _Mapping]]] = ..., redactions: _Optional[_Iterable[_Union[_memory_messages_pb2.RedactionCount, _Mapping]]] = ...) -> None: ...

class ReviseEntryRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "entry_id", "entry", "expected_revision", "secrets", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    entry_id: str
    entry: _memory_messages_pb2.EntryInput
    expected_revision: int
    secrets: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Secret]
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., entry_id: _Optional[str] = ..., entry: _Optional[_Union[_memory_messages_pb2.EntryInput, _Mapping]] = ..., expected_revision: _Optional[int] = ..., secrets: _Optional[_Iterable[_Union[_memory_messages_pb2.Secret, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class ReviseEntryResponse(_message.Message):
    __slots__ = ("result", "entry", "redactions")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    REDACTIONS_FIELD_NUMBER: _ClassVar[int]
    result: _memory_messages_pb2.WriteResult
    entry: _memory_messages_pb2.EntryVersion
    redactions: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.RedactionCount]
    def __init__(self, result: _Optional[_Union[_memory_messages_pb2.WriteResult, _Mapping]] = ..., entry: _Optional[_Union[_memory_messages_pb2.EntryVersion, _Mapping]] = ..., redactions: _Optional[_Iterable[_Union[_memory_messages_pb2.RedactionCount, _Mapping]]] = ...) -> None: ...

class ForgetEntriesRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "entry_ids", "reason", "expected_revision", "secrets")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    expected_revision: int
    secrets: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Secret]
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., expected_revision: _Optional[int] = ..., secrets: _Optional[_Iterable[_Union[_memory_messages_pb2.Secret, _Mapping]]] = ...) -> None: ...

class ForgetEntriesResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _memory_messages_pb2.WriteResult
    def __init__(self, result: _Optional[_Union[_memory_messages_pb2.WriteResult, _Mapping]] = ...) -> None: ...

class ReactivateEntriesRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "entry_ids", "reason", "expected_revision", "secrets")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    expected_revision: int
    secrets: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Secret]
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., expected_revision: _Optional[int] = ..., secrets: _Optional[_Iterable[_Union[_memory_messages_pb2.Secret, _Mapping]]] = ...) -> None: ...

class ReactivateEntriesResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _memory_messages_pb2.WriteResult
    def __init__(self, result: _Optional[_Union[_memory_messages_pb2.WriteResult, _Mapping]] = ...) -> None: ...

class OrganizeMemoryRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "mode", "expected_revision")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    mode: _memory_messages_pb2.OrganizeMode
    expected_revision: int
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., mode: _Optional[_Union[_memory_messages_pb2.OrganizeMode, str]] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class OrganizeMemoryResponse(_message.Message):
    __slots__ = ("result", "deactivated_entry_ids")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DEACTIVATED_ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    result: _memory_messages_pb2.WriteResult
    deactivated_entry_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, result: _Optional[_Union[_memory_messages_pb2.WriteResult, _Mapping]] = ..., deactivated_entry_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CompactMemoryRequest(_message.Message):
    __slots__ = ("request_id", "memory_ref", "dry_run", "limit", "reason", "expected_revision", "secrets")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    memory_ref: str
    dry_run: bool
    limit: int
    reason: str
    expected_revision: int
    secrets: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Secret]
    def __init__(self, request_id: _Optional[str] = ..., memory_ref: _Optional[str] = ..., dry_run: _Optional[bool] = ..., limit: _Optional[int] = ..., reason: _Optional[str] = ..., expected_revision: _Optional[int] = ..., secrets: _Optional[_Iterable[_Union[_memory_messages_pb2.Secret, _Mapping]]] = ...) -> None: ...

class CompactMemoryResponse(_message.Message):
    __slots__ = ("dry_run", "entry_ids", "reclaimed_bytes", "revision", "capacity")
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    RECLAIMED_BYTES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    reclaimed_bytes: int
    revision: int
    capacity: _memory_messages_pb2.Capacity
    def __init__(self, dry_run: _Optional[bool] = ..., entry_ids: _Optional[_Iterable[str]] = ..., reclaimed_bytes: _Optional[int] = ..., revision: _Optional[int] = ..., capacity: _Optional[_Union[_memory_messages_pb2.Capacity, _Mapping]] = ...) -> None: ...

class GetCapacityRequest(_message.Message):
    __slots__ = ("memory_ref", "revision")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    revision: int
    def __init__(self, memory_ref: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class GetCapacityResponse(_message.Message):
    __slots__ = ("capacity",)
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    capacity: _memory_messages_pb2.Capacity
    def __init__(self, capacity: _Optional[_Union[_memory_messages_pb2.Capacity, _Mapping]] = ...) -> None: ...

class ListRevisionsRequest(_message.Message):
    __slots__ = ("memory_ref", "since", "through")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    THROUGH_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    since: int
    through: int
    def __init__(self, memory_ref: _Optional[str] = ..., since: _Optional[int] = ..., through: _Optional[int] = ...) -> None: ...

class ListRevisionsResponse(_message.Message):
    __slots__ = ("revisions",)
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Revision]
    def __init__(self, revisions: _Optional[_Iterable[_Union[_memory_messages_pb2.Revision, _Mapping]]] = ...) -> None: ...

class GetChangesRequest(_message.Message):
    __slots__ = ("memory_ref", "revision", "since", "page_size", "page_token")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    revision: int
    since: int
    page_size: int
    page_token: str
    def __init__(self, memory_ref: _Optional[str] = ..., revision: _Optional[int] = ..., since: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetChangesResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Change]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[_memory_messages_pb2.Change, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListChangesRequest(_message.Message):
    __slots__ = ("memory_ref", "revision", "since", "page_size", "page_token")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    revision: int
    since: int
    page_size: int
    page_token: str
    def __init__(self, memory_ref: _Optional[str] = ..., revision: _Optional[int] = ..., since: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListChangesResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.Change]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[_memory_messages_pb2.Change, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetEntryVersionRequest(_message.Message):
    __slots__ = ("memory_ref", "entry_version_id")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    entry_version_id: str
    def __init__(self, memory_ref: _Optional[str] = ..., entry_version_id: _Optional[str] = ...) -> None: ...

class GetEntryVersionResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: _memory_messages_pb2.EntryVersion
    def __init__(self, entry: _Optional[_Union[_memory_messages_pb2.EntryVersion, _Mapping]] = ...) -> None: ...

class ValidateCitationRequest(_message.Message):
    __slots__ = ("memory_ref", "revision", "entry_id", "entry_version_id")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    revision: int
    entry_id: str
    entry_version_id: str
    def __init__(self, memory_ref: _Optional[str] = ..., revision: _Optional[int] = ..., entry_id: _Optional[str] = ..., entry_version_id: _Optional[str] = ...) -> None: ...

class ValidateCitationResponse(_message.Message):
    __slots__ = ("valid", "state")
    VALID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    valid: bool
    state: _memory_messages_pb2.EntryState
    def __init__(self, valid: _Optional[bool] = ..., state: _Optional[_Union[_memory_messages_pb2.EntryState, str]] = ...) -> None: ...

class ListMemoryRequest(_message.Message):
    __slots__ = ("memory_ref", "limit", "tag", "token_budget", "token_counter", "rank", "query", "revision", "run_id")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTER_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    limit: int
    tag: str
    token_budget: int
    token_counter: _memory_messages_pb2.TokenCounter
    rank: _memory_messages_pb2.Rank
    query: str
    revision: int
    run_id: str
    def __init__(self, memory_ref: _Optional[str] = ..., limit: _Optional[int] = ..., tag: _Optional[str] = ..., token_budget: _Optional[int] = ..., token_counter: _Optional[_Union[_memory_messages_pb2.TokenCounter, str]] = ..., rank: _Optional[_Union[_memory_messages_pb2.Rank, str]] = ..., query: _Optional[str] = ..., revision: _Optional[int] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListMemoryResponse(_message.Message):
    __slots__ = ("entries", "total_tokens", "token_counter", "candidate_count", "omitted_count", "first_omitted_entry_id", "first_omitted_size", "stopped_by", "revision", "effective_token_budget")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTER_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    OMITTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_OMITTED_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OMITTED_SIZE_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_memory_messages_pb2.MemoryItem]
    total_tokens: int
    token_counter: _memory_messages_pb2.TokenCounter
    candidate_count: int
    omitted_count: int
    first_omitted_entry_id: str
    first_omitted_size: int
    stopped_by: _memory_messages_pb2.StoppedBy
    revision: int
    effective_token_budget: int
    def __init__(self, entries: _Optional[_Iterable[_Union[_memory_messages_pb2.MemoryItem, _Mapping]]] = ..., total_tokens: _Optional[int] = ..., token_counter: _Optional[_Union[_memory_messages_pb2.TokenCounter, str]] = ..., candidate_count: _Optional[int] = ..., omitted_count: _Optional[int] = ..., first_omitted_entry_id: _Optional[str] = ..., first_omitted_size: _Optional[int] = ..., stopped_by: _Optional[_Union[_memory_messages_pb2.StoppedBy, str]] = ..., revision: _Optional[int] = ..., effective_token_budget: _Optional[int] = ...) -> None: ...

class SearchMemoryRequest(_message.Message):
    __slots__ = ("memory_ref", "query", "mode", "limit", "tags", "kind", "revision")
    MEMORY_REF_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    memory_ref: str
    query: str
    mode: _memory_messages_pb2.SearchMode
    limit: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    revision: int
    def __init__(self, memory_ref: _Optional[str] = ..., query: _Optional[str] = ..., mode: _Optional[_Union[_memory_messages_pb2.SearchMode, str]] = ..., limit: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("entry", "score")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    entry: _memory_messages_pb2.MemoryItem
    score: float
    def __init__(self, entry: _Optional[_Union[_memory_messages_pb2.MemoryItem, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class SearchMemoryResponse(_message.Message):
    __slots__ = ("hits", "revision", "stopped_by")
    HITS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    revision: int
    stopped_by: _memory_messages_pb2.StoppedBy
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ..., revision: _Optional[int] = ..., stopped_by: _Optional[_Union[_memory_messages_pb2.StoppedBy, str]] = ...) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SearchCapability(_message.Message):
    __slots__ = ("supported", "modes", "search_modes")
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MODES_FIELD_NUMBER: _ClassVar[int]
    supported: bool
    modes: _containers.RepeatedScalarFieldContainer[str]
    search_modes: _containers.RepeatedScalarFieldContainer[_memory_messages_pb2.SearchMode]
    def __init__(self, supported: _Optional[bool] = ..., modes: _Optional[_Iterable[str]] = ..., search_modes: _Optional[_Iterable[_Union[_memory_messages_pb2.SearchMode, str]]] = ...) -> None: ...

class InjectionBudgetCapability(_message.Message):
    __slots__ = ("supported", "token_counter", "default_token_counter")
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTER_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOKEN_COUNTER_FIELD_NUMBER: _ClassVar[int]
    supported: bool
    token_counter: str
    default_token_counter: _memory_messages_pb2.TokenCounter
    def __init__(self, supported: _Optional[bool] = ..., token_counter: _Optional[str] = ..., default_token_counter: _Optional[_Union[_memory_messages_pb2.TokenCounter, str]] = ...) -> None: ...

class CompactionPolicy(_message.Message):
    __slots__ = ("enabled", "min_tombstone_revisions")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MIN_TOMBSTONE_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    min_tombstone_revisions: int
    def __init__(self, enabled: _Optional[bool] = ..., min_tombstone_revisions: _Optional[int] = ...) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("supported", "max_entry_size_bytes", "ttl_supported", "search", "injection_budget", "capacity_budget", "compaction", "max_history_revisions", "capabilities_json")
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRY_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TTL_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    INJECTION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_HISTORY_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_JSON_FIELD_NUMBER: _ClassVar[int]
    supported: bool
    max_entry_size_bytes: int
    ttl_supported: bool
    search: SearchCapability
    injection_budget: InjectionBudgetCapability
    capacity_budget: _memory_messages_pb2.CapacityBudget
    compaction: CompactionPolicy
    max_history_revisions: int
    capabilities_json: str
    def __init__(self, supported: _Optional[bool] = ..., max_entry_size_bytes: _Optional[int] = ..., ttl_supported: _Optional[bool] = ..., search: _Optional[_Union[SearchCapability, _Mapping]] = ..., injection_budget: _Optional[_Union[InjectionBudgetCapability, _Mapping]] = ..., capacity_budget: _Optional[_Union[_memory_messages_pb2.CapacityBudget, _Mapping]] = ..., compaction: _Optional[_Union[CompactionPolicy, _Mapping]] = ..., max_history_revisions: _Optional[int] = ..., capabilities_json: _Optional[str] = ...) -> None: ...
