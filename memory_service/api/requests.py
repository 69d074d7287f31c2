"""Converters from memory protos to domain commands and queries (requests, fingerprints)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from google.protobuf.message import Message

from memory_service.domain.commands import (
    AppendEntries,
    CapacityQuery,
    ChangeEntryStates,
    ChangesQuery,
    CitationQuery,
    CompactMemory,
    EntryDraft,
    EntryVersionQuery,
    ListQuery,
    OrganizeMemory,
    OrganizeMode,
    Rank,
    ReviseEntry,
    RevisionsQuery,
    SearchMode,
    SearchQuery,
    WriteTarget,
)
from memory_service.domain.read_input_rules import (
    validate_capacity,
    validate_changes,
    validate_citation,
    validate_list,
    validate_revisions,
    validate_search,
)
from memory_service.domain.token_counters import TokenCounter
from memory_service.domain.write_input_rules import raise_if
from memory_service.usecases.write_path import Envelope
from ration.memory.v1 import memory_pb2, memory_service_pb2
from servicekit.errors import FieldViolation, validation_error
from servicekit.redaction import Secret
from servicekit.timestamps import timestamp_violation, to_datetime

T = TypeVar("T")
Q = TypeVar("Q")

_ORGANIZE_MODES = {memory_pb2.ORGANIZE_MODE_DEDUPE: OrganizeMode.DEDUPE}
# UNSPECIFIED means the default for these two (the advertised unit; recency).
_UNITS: dict[int, TokenCounter | None] = {
    memory_pb2.TOKEN_COUNTER_UNSPECIFIED: None,
    memory_pb2.TOKEN_COUNTER_O200K_BASE: TokenCounter.O200K_BASE,
    memory_pb2.TOKEN_COUNTER_CL100K_BASE: TokenCounter.CL100K_BASE,
    memory_pb2.TOKEN_COUNTER_CHARS: TokenCounter.CHARS,
}
_RANKS = {
    memory_pb2.RANK_UNSPECIFIED: Rank.RECENCY,
    memory_pb2.RANK_RECENCY: Rank.RECENCY,
    memory_pb2.RANK_RELEVANCE: Rank.RELEVANCE,
}
_SEARCH_MODES = {
    memory_pb2.SEARCH_MODE_SEMANTIC: SearchMode.SEMANTIC,
    memory_pb2.SEARCH_MODE_FILTER: SearchMode.FILTER,
}


def envelope(method: str, encode: Callable[[T], bytes]) -> Envelope[T]:
    """The method (in the idempotency fingerprint, with the redacted command) and the encoder."""
    return Envelope(method, encode)


def _valid(query: Q, rules: Callable[[Q], list[FieldViolation]]) -> Q:
    """The query, once its input rules (domain/read_input_rules.py) found nothing wrong."""
    raise_if(rules(query))
    return query


def _optional(message: Message, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


def _expiry(entry: memory_pb2.EntryInput, path: str) -> datetime | None:
    """The entry's expires_at; one outside Timestamp's range is refused as bad input here,
    before anything else reads it (the other rules for it live in domain/write_input_rules.py)."""
    if not entry.HasField("expires_at"):
        return None
    violation = timestamp_violation(entry.expires_at, f"{path}.expires_at")
    if violation is not None:
        raise validation_error([violation])
    return to_datetime(entry.expires_at)


def _target(request: Any) -> WriteTarget:
    return WriteTarget(
        request_id=request.request_id,
        memory_ref=request.memory_ref,
        expected_revision=_optional(request, "expected_revision"),
    )


def _draft(entry: memory_pb2.EntryInput, path: str) -> EntryDraft:
    return EntryDraft(
        content=entry.content,
        entry_id=entry.entry_id,
        kind=entry.kind,
        tags=tuple(entry.tags),
        metadata=dict(entry.metadata),
        expires_at=_expiry(entry, path),
    )


def _secrets(secrets: Iterable[memory_pb2.Secret]) -> tuple[Secret, ...]:
    return tuple(Secret(s.secret_id, s.value) for s in secrets)


def append_command(request: memory_service_pb2.AppendEntriesRequest) -> AppendEntries:
    return AppendEntries(
        _target(request),
        tuple(_draft(e, f"entries[{i}]") for i, e in enumerate(request.entries)),
        _secrets(request.secrets),
    )


def revise_command(request: memory_service_pb2.ReviseEntryRequest) -> ReviseEntry:
    return ReviseEntry(
        target=_target(request),
        entry_id=request.entry_id,
        entry=_draft(request.entry, "entry"),
        secrets=_secrets(request.secrets),
        reason=request.reason,
    )


def states_command(
    request: memory_service_pb2.ForgetEntriesRequest | memory_service_pb2.ReactivateEntriesRequest,
) -> ChangeEntryStates:
    return ChangeEntryStates(
        _target(request), tuple(request.entry_ids), request.reason, _secrets(request.secrets)
    )


def organize_command(request: memory_service_pb2.OrganizeMemoryRequest) -> OrganizeMemory:
    return OrganizeMemory(_target(request), _ORGANIZE_MODES.get(request.mode))


def compact_command(request: memory_service_pb2.CompactMemoryRequest) -> CompactMemory:
    return CompactMemory(
        _target(request),
        request.dry_run,
        request.limit,
        request.reason,
        _secrets(request.secrets),
    )


def capacity_query(request: memory_service_pb2.GetCapacityRequest) -> CapacityQuery:
    return _valid(
        CapacityQuery(request.memory_ref, _optional(request, "revision")), validate_capacity
    )


def revisions_query(request: memory_service_pb2.ListRevisionsRequest) -> RevisionsQuery:
    query = RevisionsQuery(request.memory_ref, request.since, request.through)
    return _valid(query, validate_revisions)


def changes_query(
    request: memory_service_pb2.ListChangesRequest | memory_service_pb2.GetChangesRequest,
) -> ChangesQuery:
    """ListChanges and the deprecated GetChanges take the same fields."""
    selector = request.WhichOneof("selector")
    query = ChangesQuery(
        memory_ref=request.memory_ref,
        revision=request.revision if selector == "revision" else None,
        since=request.since if selector == "since" else None,
        page_size=request.page_size,
        page_token=request.page_token,
    )
    return _valid(query, validate_changes)


def entry_version_query(request: memory_service_pb2.GetEntryVersionRequest) -> EntryVersionQuery:
    return EntryVersionQuery(request.memory_ref, request.entry_version_id)


def citation_query(request: memory_service_pb2.ValidateCitationRequest) -> CitationQuery:
    query = CitationQuery(
        request.memory_ref, request.revision, request.entry_id, request.entry_version_id
    )
    return _valid(query, validate_citation)


def list_query(request: memory_service_pb2.ListMemoryRequest) -> ListQuery:
    unknown = []
    if request.token_counter not in _UNITS:
        unknown.append("token_counter")
    if request.rank not in _RANKS:
        unknown.append("rank")
    query = ListQuery(
        memory_ref=request.memory_ref,
        limit=request.limit,
        tag=request.tag,
        token_budget=request.token_budget,
        unit=_UNITS.get(request.token_counter),
        rank=_RANKS.get(request.rank, Rank.RECENCY),
        query=request.query,
        revision=_optional(request, "revision"),
        run_id=request.run_id,
        unknown=tuple(unknown),
    )
    return _valid(query, validate_list)


def search_query(request: memory_service_pb2.SearchMemoryRequest) -> SearchQuery:
    query = SearchQuery(
        memory_ref=request.memory_ref,
        query=request.query,
        mode=_SEARCH_MODES.get(request.mode),
        limit=request.limit,
        tags=tuple(request.tags),
        kind=request.kind or None,
        revision=_optional(request, "revision"),
    )
    return _valid(query, validate_search)


def authorization(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The caller's authorization header, forwarded to budget_service for the run_id clamp."""
    for key, value in metadata or ():
        if key == "authorization":
            return str(value)
    return None
