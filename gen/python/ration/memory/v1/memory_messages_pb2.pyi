import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenCounter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_COUNTER_UNSPECIFIED: _ClassVar[TokenCounter]
    TOKEN_COUNTER_O200K_BASE: _ClassVar[TokenCounter]
    TOKEN_COUNTER_CL100K_BASE: _ClassVar[TokenCounter]
    TOKEN_COUNTER_CHARS: _ClassVar[TokenCounter]

class Rank(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANK_UNSPECIFIED: _ClassVar[Rank]
    RANK_RECENCY: _ClassVar[Rank]
    RANK_RELEVANCE: _ClassVar[Rank]

class StoppedBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOPPED_BY_UNSPECIFIED: _ClassVar[StoppedBy]
    STOPPED_BY_NONE: _ClassVar[StoppedBy]
    STOPPED_BY_BUDGET: _ClassVar[StoppedBy]
    STOPPED_BY_LIMIT: _ClassVar[StoppedBy]
    STOPPED_BY_SIZE: _ClassVar[StoppedBy]

class EntryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_STATE_UNSPECIFIED: _ClassVar[EntryState]
    ENTRY_STATE_ACTIVE: _ClassVar[EntryState]
    ENTRY_STATE_INACTIVE: _ClassVar[EntryState]

class ChangeOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_OP_UNSPECIFIED: _ClassVar[ChangeOp]
    CHANGE_OP_ADD: _ClassVar[ChangeOp]
    CHANGE_OP_REVISE: _ClassVar[ChangeOp]
    CHANGE_OP_DEACTIVATE: _ClassVar[ChangeOp]
    CHANGE_OP_REACTIVATE: _ClassVar[ChangeOp]
    CHANGE_OP_COMPACT: _ClassVar[ChangeOp]

class CapacityDimension(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPACITY_DIMENSION_UNSPECIFIED: _ClassVar[CapacityDimension]
    CAPACITY_DIMENSION_MANIFEST_BYTES: _ClassVar[CapacityDimension]
    CAPACITY_DIMENSION_MANIFEST_ENTRIES: _ClassVar[CapacityDimension]
    CAPACITY_DIMENSION_ACTIVE_ENTRIES: _ClassVar[CapacityDimension]

class OrganizeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORGANIZE_MODE_UNSPECIFIED: _ClassVar[OrganizeMode]
    ORGANIZE_MODE_DEDUPE: _ClassVar[OrganizeMode]

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_UNSPECIFIED: _ClassVar[SearchMode]
    SEARCH_MODE_SEMANTIC: _ClassVar[SearchMode]
    SEARCH_MODE_FILTER: _ClassVar[SearchMode]

class RevisionOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVISION_OPERATION_UNSPECIFIED: _ClassVar[RevisionOperation]
    REVISION_OPERATION_APPEND: _ClassVar[RevisionOperation]
    REVISION_OPERATION_REVISE: _ClassVar[RevisionOperation]
    REVISION_OPERATION_FORGET: _ClassVar[RevisionOperation]
    REVISION_OPERATION_REACTIVATE: _ClassVar[RevisionOperation]
    REVISION_OPERATION_ORGANIZE: _ClassVar[RevisionOperation]
    REVISION_OPERATION_COMPACT: _ClassVar[RevisionOperation]
TOKEN_COUNTER_UNSPECIFIED: TokenCounter
TOKEN_COUNTER_O200K_BASE: TokenCounter
TOKEN_COUNTER_CL100K_BASE: TokenCounter
TOKEN_COUNTER_CHARS: TokenCounter
RANK_UNSPECIFIED: Rank
RANK_RECENCY: Rank
RANK_RELEVANCE: Rank
STOPPED_BY_UNSPECIFIED: StoppedBy
STOPPED_BY_NONE: StoppedBy
STOPPED_BY_BUDGET: StoppedBy
STOPPED_BY_LIMIT: StoppedBy
STOPPED_BY_SIZE: StoppedBy
ENTRY_STATE_UNSPECIFIED: EntryState
ENTRY_STATE_ACTIVE: EntryState
ENTRY_STATE_INACTIVE: EntryState
CHANGE_OP_UNSPECIFIED: ChangeOp
CHANGE_OP_ADD: ChangeOp
CHANGE_OP_REVISE: ChangeOp
CHANGE_OP_DEACTIVATE: ChangeOp
CHANGE_OP_REACTIVATE: ChangeOp
CHANGE_OP_COMPACT: ChangeOp
CAPACITY_DIMENSION_UNSPECIFIED: CapacityDimension
CAPACITY_DIMENSION_MANIFEST_BYTES: CapacityDimension
CAPACITY_DIMENSION_MANIFEST_ENTRIES: CapacityDimension
CAPACITY_DIMENSION_ACTIVE_ENTRIES: CapacityDimension
ORGANIZE_MODE_UNSPECIFIED: OrganizeMode
ORGANIZE_MODE_DEDUPE: OrganizeMode
SEARCH_MODE_UNSPECIFIED: SearchMode
SEARCH_MODE_SEMANTIC: SearchMode
SEARCH_MODE_FILTER: SearchMode
REVISION_OPERATION_UNSPECIFIED: RevisionOperation
REVISION_OPERATION_APPEND: RevisionOperation
REVISION_OPERATION_REVISE: RevisionOperation
REVISION_OPERATION_FORGET: RevisionOperation
REVISION_OPERATION_REACTIVATE: RevisionOperation
REVISION_OPERATION_ORGANIZE: RevisionOperation
REVISION_OPERATION_COMPACT: RevisionOperation

class Secret(_message.Message):
    __slots__ = ("secret_id", "value")
    SECRET_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    secret_id: str
    value: str
    def __init__(self, secret_id: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class EntryInput(_message.Message):
    __slots__ = ("entry_id", "kind", "content", "tags", "metadata", "expires_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    kind: str
    content: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    metadata: _containers.ScalarMap[str, str]
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, entry_id: _Optional[str] = ..., kind: _Optional[str] = ..., content: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EntrySizes(_message.Message):
    __slots__ = ("o200k_base", "cl100k_base", "chars")
    O200K_BASE_FIELD_NUMBER: _ClassVar[int]
    CL100K_BASE_FIELD_NUMBER: _ClassVar[int]
    CHARS_FIELD_NUMBER: _ClassVar[int]
    o200k_base: int
    cl100k_base: int
    chars: int
    def __init__(self, o200k_base: _Optional[int] = ..., cl100k_base: _Optional[int] = ..., chars: _Optional[int] = ...) -> None: ...

class EntryVersion(_message.Message):
    __slots__ = ("entry_id", "entry_version_id", "version", "previous_version_id", "kind", "content", "tags", "metadata", "content_hash", "created_in_revision", "created_at", "expires_at", "sizes")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CREATED_IN_REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    entry_version_id: str
    version: int
    previous_version_id: str
    kind: str
    content: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    metadata: _containers.ScalarMap[str, str]
    content_hash: str
    created_in_revision: int
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    sizes: EntrySizes
    def __init__(self, entry_id: _Optional[str] = ..., entry_version_id: _Optional[str] = ..., version: _Optional[int] = ..., previous_version_id: _Optional[str] = ..., kind: _Optional[str] = ..., content: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., content_hash: _Optional[str] = ..., created_in_revision: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sizes: _Optional[_Union[EntrySizes, _Mapping]] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("revision", "op", "entry_id", "from_entry_version_id", "to_entry_version_id", "reason")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    TO_ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    revision: int
    op: ChangeOp
    entry_id: str
    from_entry_version_id: str
    to_entry_version_id: str
    reason: str
    def __init__(self, revision: _Optional[int] = ..., op: _Optional[_Union[ChangeOp, str]] = ..., entry_id: _Optional[str] = ..., from_entry_version_id: _Optional[str] = ..., to_entry_version_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RedactionCount(_message.Message):
    __slots__ = ("name", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class CapacityBudget(_message.Message):
    __slots__ = ("max_active_entries", "max_manifest_entries", "max_manifest_bytes")
    MAX_ACTIVE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_MANIFEST_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_MANIFEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_active_entries: int
    max_manifest_entries: int
    max_manifest_bytes: int
    def __init__(self, max_active_entries: _Optional[int] = ..., max_manifest_entries: _Optional[int] = ..., max_manifest_bytes: _Optional[int] = ...) -> None: ...

class Capacity(_message.Message):
    __slots__ = ("revision", "active_entry_count", "manifest_entry_count", "manifest_bytes", "compactable_entry_count", "budget", "exceeded")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPACTABLE_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    active_entry_count: int
    manifest_entry_count: int
    manifest_bytes: int
    compactable_entry_count: int
    budget: CapacityBudget
    exceeded: _containers.RepeatedScalarFieldContainer[CapacityDimension]
    def __init__(self, revision: _Optional[int] = ..., active_entry_count: _Optional[int] = ..., manifest_entry_count: _Optional[int] = ..., manifest_bytes: _Optional[int] = ..., compactable_entry_count: _Optional[int] = ..., budget: _Optional[_Union[CapacityBudget, _Mapping]] = ..., exceeded: _Optional[_Iterable[_Union[CapacityDimension, str]]] = ...) -> None: ...

class Revision(_message.Message):
    __slots__ = ("revision", "created_at", "operation", "change_count", "active_entry_count", "manifest_entry_count", "manifest_bytes", "revision_operation")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    REVISION_OPERATION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    created_at: _timestamp_pb2.Timestamp
    operation: str
    change_count: int
    active_entry_count: int
    manifest_entry_count: int
    manifest_bytes: int
    revision_operation: RevisionOperation
    def __init__(self, revision: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., operation: _Optional[str] = ..., change_count: _Optional[int] = ..., active_entry_count: _Optional[int] = ..., manifest_entry_count: _Optional[int] = ..., manifest_bytes: _Optional[int] = ..., revision_operation: _Optional[_Union[RevisionOperation, str]] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ("revision", "changes", "capacity")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    revision: int
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    capacity: Capacity
    def __init__(self, revision: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., capacity: _Optional[_Union[Capacity, _Mapping]] = ...) -> None: ...

class MemoryItem(_message.Message):
    __slots__ = ("entry_id", "entry_version_id", "kind", "content", "tags", "created_at", "size", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    entry_version_id: str
    kind: str
    content: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    created_at: _timestamp_pb2.Timestamp
    size: int
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, entry_id: _Optional[str] = ..., entry_version_id: _Optional[str] = ..., kind: _Optional[str] = ..., content: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., size: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...
