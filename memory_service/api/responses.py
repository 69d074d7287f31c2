"""Converters from domain results to memory protos (responses and stored write replies)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from memory_service.api.capabilities import MemoryCapabilities
from memory_service.api.item_messages import MemoryItems
from memory_service.domain.capacity import Dimension
from memory_service.domain.manifest import ChangeOp, EntryState
from memory_service.domain.records import (
    CapacityReport,
    ListResult,
    RecordedChange,
    RevisionInfo,
    SearchResult,
    StoredVersion,
)
from memory_service.domain.selection import StoppedBy
from memory_service.domain.token_counters import TokenCounter
from memory_service.usecases.compaction import CompactResult
from memory_service.usecases.queries import ChangesPage
from memory_service.usecases.write_path import WriteResult
from memory_service.usecases.writes import AppendResult, OrganizeResult, ReviseResult
from ration.memory.v1 import memory_pb2, memory_service_pb2
from servicekit.timestamps import timestamp

_DIMENSIONS = {
    Dimension.MANIFEST_BYTES: memory_pb2.CAPACITY_DIMENSION_MANIFEST_BYTES,
    Dimension.MANIFEST_ENTRIES: memory_pb2.CAPACITY_DIMENSION_MANIFEST_ENTRIES,
    Dimension.ACTIVE_ENTRIES: memory_pb2.CAPACITY_DIMENSION_ACTIVE_ENTRIES,
}
_CHANGE_OPS = {
    ChangeOp.ADD: memory_pb2.CHANGE_OP_ADD,
    ChangeOp.REVISE: memory_pb2.CHANGE_OP_REVISE,
    ChangeOp.DEACTIVATE: memory_pb2.CHANGE_OP_DEACTIVATE,
    ChangeOp.REACTIVATE: memory_pb2.CHANGE_OP_REACTIVATE,
    ChangeOp.COMPACT: memory_pb2.CHANGE_OP_COMPACT,
}
_UNITS = {
    TokenCounter.O200K_BASE: memory_pb2.TOKEN_COUNTER_O200K_BASE,
    TokenCounter.CL100K_BASE: memory_pb2.TOKEN_COUNTER_CL100K_BASE,
    TokenCounter.CHARS: memory_pb2.TOKEN_COUNTER_CHARS,
}
# The stored operation word of a revision (DESIGN 11) to its enum; both are served.
_OPERATIONS = {
    "append": memory_pb2.REVISION_OPERATION_APPEND,
    "revise": memory_pb2.REVISION_OPERATION_REVISE,
    "forget": memory_pb2.REVISION_OPERATION_FORGET,
    "reactivate": memory_pb2.REVISION_OPERATION_REACTIVATE,
    "organize": memory_pb2.REVISION_OPERATION_ORGANIZE,
    "compact": memory_pb2.REVISION_OPERATION_COMPACT,
}
_SEARCH_MODES = {
    "semantic": memory_pb2.SEARCH_MODE_SEMANTIC,
    "filter": memory_pb2.SEARCH_MODE_FILTER,
}
_STOPPED_BY = {
    StoppedBy.NONE: memory_pb2.STOPPED_BY_NONE,
    StoppedBy.BUDGET: memory_pb2.STOPPED_BY_BUDGET,
    StoppedBy.LIMIT: memory_pb2.STOPPED_BY_LIMIT,
    StoppedBy.SIZE: memory_pb2.STOPPED_BY_SIZE,
}
_STATES = {
    EntryState.ACTIVE: memory_pb2.ENTRY_STATE_ACTIVE,
    EntryState.INACTIVE: memory_pb2.ENTRY_STATE_INACTIVE,
}


def capacity(report: CapacityReport) -> memory_pb2.Capacity:
    usage, budget = report.usage, report.budget
    return memory_pb2.Capacity(
        revision=report.revision,
        active_entry_count=usage.active_entries,
        manifest_entry_count=usage.manifest_entries,
        manifest_bytes=usage.manifest_bytes,
        compactable_entry_count=report.compactable_entry_count,
        budget=memory_pb2.CapacityBudget(
            max_active_entries=budget.max_active_entries,
            max_manifest_entries=budget.max_manifest_entries,
            max_manifest_bytes=budget.max_manifest_bytes,
        ),
        exceeded=[_DIMENSIONS[d] for d in report.exceeded],
    )


def change(recorded: RecordedChange) -> memory_pb2.Change:
    c = recorded.change
    return memory_pb2.Change(
        revision=recorded.revision,
        op=_CHANGE_OPS[c.op],
        entry_id=c.entry_id,
        from_entry_version_id=c.from_entry_version_id or "",
        to_entry_version_id=c.to_entry_version_id or "",
        reason=c.reason or "",
    )


def entry_version(version: StoredVersion) -> memory_pb2.EntryVersion:
    message = memory_pb2.EntryVersion(
        entry_id=version.entry_id,
        entry_version_id=version.entry_version_id,
        version=version.version,
        previous_version_id=version.previous_version_id or "",
        kind=version.kind,
        content=version.content,
        tags=list(version.tags),
        metadata=dict(version.metadata),
        content_hash=version.content_hash,
        created_in_revision=version.created_in_revision,
        created_at=timestamp(version.created_at),
        sizes=memory_pb2.EntrySizes(
            o200k_base=version.sizes[TokenCounter.O200K_BASE],
            cl100k_base=version.sizes[TokenCounter.CL100K_BASE],
            chars=version.sizes[TokenCounter.CHARS],
        ),
    )
    if version.expires_at is not None:
        message.expires_at.CopyFrom(timestamp(version.expires_at))
    return message


def _write_result(result: WriteResult) -> memory_pb2.WriteResult:
    return memory_pb2.WriteResult(
        revision=result.revision,
        changes=[change(RecordedChange(result.revision, c)) for c in result.changes],
        capacity=capacity(result.capacity),
    )


def _redactions(counts: Mapping[str, int]) -> list[memory_pb2.RedactionCount]:
    return [memory_pb2.RedactionCount(name=n, count=counts[n]) for n in sorted(counts)]


def encode_append(outcome: AppendResult) -> bytes:
    return memory_service_pb2.AppendEntriesResponse(
        result=_write_result(outcome.result),
        entries=[entry_version(v) for v in outcome.entries],
        redactions=_redactions(outcome.redactions),
    ).SerializeToString(deterministic=True)


def encode_revise(outcome: ReviseResult) -> bytes:
    return memory_service_pb2.ReviseEntryResponse(
        result=_write_result(outcome.result),
        entry=entry_version(outcome.entry),
        redactions=_redactions(outcome.redactions),
    ).SerializeToString(deterministic=True)


def encode_forget(outcome: WriteResult) -> bytes:
    return memory_service_pb2.ForgetEntriesResponse(
        result=_write_result(outcome)
    ).SerializeToString(deterministic=True)


def encode_reactivate(outcome: WriteResult) -> bytes:
    return memory_service_pb2.ReactivateEntriesResponse(
        result=_write_result(outcome)
    ).SerializeToString(deterministic=True)


def encode_organize(outcome: OrganizeResult) -> bytes:
    return memory_service_pb2.OrganizeMemoryResponse(
        result=_write_result(outcome.result),
        deactivated_entry_ids=list(outcome.deactivated_entry_ids),
    ).SerializeToString(deterministic=True)


def encode_compact(outcome: CompactResult) -> bytes:
    return memory_service_pb2.CompactMemoryResponse(
        dry_run=outcome.dry_run,
        entry_ids=list(outcome.entry_ids),
        reclaimed_bytes=outcome.reclaimed_bytes,
        revision=outcome.revision,
        capacity=capacity(outcome.capacity),
    ).SerializeToString(deterministic=True)


def capacity_response(report: CapacityReport) -> memory_service_pb2.GetCapacityResponse:
    return memory_service_pb2.GetCapacityResponse(capacity=capacity(report))


def revisions_response(
    revisions: Iterable[RevisionInfo],
) -> memory_service_pb2.ListRevisionsResponse:
    return memory_service_pb2.ListRevisionsResponse(
        revisions=[
            memory_pb2.Revision(
                revision=r.revision,
                created_at=timestamp(r.created_at),
                operation=r.operation,
                revision_operation=_OPERATIONS[r.operation],
                change_count=r.change_count,
                active_entry_count=r.usage.active_entries,
                manifest_entry_count=r.usage.manifest_entries,
                manifest_bytes=r.manifest_bytes,
            )
            for r in revisions
        ]
    )


def changes_response(page: ChangesPage) -> memory_service_pb2.ListChangesResponse:
    return memory_service_pb2.ListChangesResponse(
        changes=[change(c) for c in page.changes], next_page_token=page.next_page_token
    )


def deprecated_changes_response(page: ChangesPage) -> memory_service_pb2.GetChangesResponse:
    """GetChanges (deprecated): the ListChanges answer under its old message name."""
    return memory_service_pb2.GetChangesResponse.FromString(
        changes_response(page).SerializeToString()
    )


def entry_version_response(version: StoredVersion) -> memory_service_pb2.GetEntryVersionResponse:
    return memory_service_pb2.GetEntryVersionResponse(entry=entry_version(version))


def citation_response(state: EntryState | None) -> memory_service_pb2.ValidateCitationResponse:
    if state is None:
        return memory_service_pb2.ValidateCitationResponse(valid=False)
    return memory_service_pb2.ValidateCitationResponse(valid=True, state=_STATES[state])


def capabilities_response(caps: MemoryCapabilities) -> memory_service_pb2.GetCapabilitiesResponse:
    return memory_service_pb2.GetCapabilitiesResponse(
        supported=True,
        max_entry_size_bytes=caps.max_entry_size_bytes,
        ttl_supported=True,
        search=memory_service_pb2.SearchCapability(
            supported=bool(caps.search_modes),
            modes=list(caps.search_modes),
            search_modes=[_SEARCH_MODES[m] for m in caps.search_modes],
        ),
        injection_budget=memory_service_pb2.InjectionBudgetCapability(
            supported=caps.injection_budget,
            token_counter=caps.token_counter if caps.injection_budget else "",
            default_token_counter=(
                _UNITS[TokenCounter(caps.token_counter)]
                if caps.injection_budget
                else memory_pb2.TOKEN_COUNTER_UNSPECIFIED
            ),
        ),
        capacity_budget=memory_pb2.CapacityBudget(
            max_active_entries=caps.max_active_entries,
            max_manifest_entries=caps.max_manifest_entries,
            max_manifest_bytes=caps.max_manifest_bytes,
        ),
        compaction=memory_service_pb2.CompactionPolicy(
            enabled=caps.compaction_enabled,
            min_tombstone_revisions=caps.min_tombstone_revisions,
        ),
        max_history_revisions=caps.max_history_revisions,
        capabilities_json=caps.to_json(),
    )


def list_response(result: ListResult, items: MemoryItems) -> memory_service_pb2.ListMemoryResponse:
    """The response of this answer; a remembered answer's is built once (MemoryItems)."""
    return items.list_response(result, functools.partial(_list_message, result, items))


def _list_message(result: ListResult, items: MemoryItems) -> memory_service_pb2.ListMemoryResponse:
    response = memory_service_pb2.ListMemoryResponse(
        entries=[items.message(i) for i in result.entries],
        total_tokens=result.total_tokens,
        token_counter=_UNITS[result.unit],
        candidate_count=result.candidate_count,
        omitted_count=result.omitted_count,
        stopped_by=_STOPPED_BY[result.stopped_by],
        revision=result.revision,
    )
    if result.first_omitted is not None:
        response.first_omitted_entry_id = result.first_omitted.entry_id
        response.first_omitted_size = result.first_omitted.size
    if result.effective_token_budget is not None:
        response.effective_token_budget = result.effective_token_budget
    return response


def search_response(
    result: SearchResult, items: MemoryItems
) -> memory_service_pb2.SearchMemoryResponse:
    return memory_service_pb2.SearchMemoryResponse(
        hits=[
            memory_service_pb2.SearchHit(entry=items.message(i), score=s) for i, s in result.hits
        ],
        revision=result.revision,
        stopped_by=_STOPPED_BY[result.stopped_by],
    )
