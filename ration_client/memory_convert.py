"""Memory protobuf messages to the memory client's views and back: the only place knowing both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ration.memory.v1 import memory_pb2 as pb
from ration.memory.v1 import memory_service_pb2 as rpc
from ration_client import memory_views as v
from ration_client.convert import EnumTable, datetime_of, timestamp_of

TOKEN_COUNTERS = EnumTable(v.TokenCounter, pb.TokenCounter, "TOKEN_COUNTER_")
RANKS = EnumTable(v.Rank, pb.Rank, "RANK_")
STOPPED_BY = EnumTable(v.StoppedBy, pb.StoppedBy, "STOPPED_BY_")
SEARCH_MODES = EnumTable(v.SearchMode, pb.SearchMode, "SEARCH_MODE_")
CHANGE_OPS = EnumTable(v.ChangeOp, pb.ChangeOp, "CHANGE_OP_")
CAPACITY_DIMENSIONS = EnumTable(v.CapacityDimension, pb.CapacityDimension, "CAPACITY_DIMENSION_")
ENTRY_STATES = EnumTable(v.EntryState, pb.EntryState, "ENTRY_STATE_")
OPERATIONS = EnumTable(v.RevisionOperation, pb.RevisionOperation, "REVISION_OPERATION_")

# ---- to the server ---------------------------------------------------------------------------

EntryLike = str | v.EntryInput | pb.EntryInput | Mapping[str, Any]


def entry_message(entry: EntryLike) -> pb.EntryInput:
    """A string is the content; a mapping holds EntryInput's fields."""
    if isinstance(entry, pb.EntryInput):
        return entry
    if isinstance(entry, str):
        return pb.EntryInput(content=entry)
    if not isinstance(entry, v.EntryInput):
        entry = v.EntryInput(**entry)
    message = pb.EntryInput(
        entry_id=entry.entry_id,
        kind=entry.kind,
        content=entry.content,
        tags=list(entry.tags),
        metadata=dict(entry.metadata),
    )
    if entry.expires_at is not None:
        message.expires_at.CopyFrom(timestamp_of(entry.expires_at))
    return message


def token_counter_number(counter: v.TokenCounter | None) -> Any:
    """None: UNSPECIFIED, the server's advertised default."""
    return 0 if counter is None else TOKEN_COUNTERS.number(counter)


def secret_messages(secrets: Mapping[str, str] | None) -> list[pb.Secret]:
    return [pb.Secret(secret_id=k, value=value) for k, value in (secrets or {}).items()]


# ---- from the server -------------------------------------------------------------------------


def entry_version(m: pb.EntryVersion) -> v.EntryVersion:
    return v.EntryVersion(
        entry_id=m.entry_id,
        entry_version_id=m.entry_version_id,
        version=m.version,
        previous_version_id=m.previous_version_id,
        kind=m.kind,
        content=m.content,
        tags=tuple(m.tags),
        metadata=dict(m.metadata),
        content_hash=m.content_hash,
        created_in_revision=m.created_in_revision,
        created_at=datetime_of(m.created_at),
        expires_at=datetime_of(m.expires_at) if m.HasField("expires_at") else None,
        sizes=v.EntrySizes(m.sizes.o200k_base, m.sizes.cl100k_base, m.sizes.chars),
    )


def change(m: pb.Change) -> v.Change:
    return v.Change(
        revision=m.revision,
        op=CHANGE_OPS.required(m.op),
        entry_id=m.entry_id,
        from_entry_version_id=m.from_entry_version_id,
        to_entry_version_id=m.to_entry_version_id,
        reason=m.reason,
    )


def capacity(m: pb.Capacity) -> v.Capacity:
    b = m.budget
    return v.Capacity(
        revision=m.revision,
        active_entry_count=m.active_entry_count,
        manifest_entry_count=m.manifest_entry_count,
        manifest_bytes=m.manifest_bytes,
        compactable_entry_count=m.compactable_entry_count,
        budget=v.CapacityBudget(b.max_active_entries, b.max_manifest_entries, b.max_manifest_bytes),
        exceeded=tuple(CAPACITY_DIMENSIONS.required(d) for d in m.exceeded),
    )


def write_result(
    m: pb.WriteResult,
    entries: Any = (),
    redactions: Any = (),
) -> v.WriteResult:
    return v.WriteResult(
        revision=m.revision,
        changes=tuple(change(c) for c in m.changes),
        capacity=capacity(m.capacity),
        entries=tuple(entry_version(e) for e in entries),
        redactions={r.name: r.count for r in redactions},
    )


def appended(m: rpc.AppendEntriesResponse) -> v.WriteResult:
    return write_result(m.result, m.entries, m.redactions)


def revised(m: rpc.ReviseEntryResponse) -> v.WriteResult:
    return write_result(m.result, [m.entry], m.redactions)


def memory_item(m: pb.MemoryItem) -> v.MemoryItem:
    return v.MemoryItem(
        entry_id=m.entry_id,
        entry_version_id=m.entry_version_id,
        kind=m.kind,
        content=m.content,
        tags=tuple(m.tags),
        metadata=dict(m.metadata),
        created_at=datetime_of(m.created_at),
        size=m.size,
    )


def memory_list(m: rpc.ListMemoryResponse) -> v.MemoryList:
    budget = m.effective_token_budget if m.HasField("effective_token_budget") else None
    return v.MemoryList(
        entries=tuple(memory_item(e) for e in m.entries),
        total_tokens=m.total_tokens,
        token_counter=TOKEN_COUNTERS.required(m.token_counter),
        candidate_count=m.candidate_count,
        omitted_count=m.omitted_count,
        first_omitted_entry_id=m.first_omitted_entry_id,
        first_omitted_size=m.first_omitted_size,
        stopped_by=STOPPED_BY.required(m.stopped_by),
        revision=m.revision,
        effective_token_budget=budget,
    )


def search_result(m: rpc.SearchMemoryResponse) -> v.SearchResult:
    return v.SearchResult(
        hits=tuple(v.SearchHit(memory_item(h.entry), h.score) for h in m.hits),
        revision=m.revision,
        stopped_by=STOPPED_BY.member(m.stopped_by) or v.StoppedBy.NONE,
    )


def citation(m: rpc.ValidateCitationResponse) -> v.Citation:
    return v.Citation(m.valid, ENTRY_STATES.member(m.state))


def revision(m: pb.Revision) -> v.Revision:
    return v.Revision(
        revision=m.revision,
        created_at=datetime_of(m.created_at),
        operation=OPERATIONS.required(m.revision_operation),
        change_count=m.change_count,
        active_entry_count=m.active_entry_count,
        manifest_entry_count=m.manifest_entry_count,
        manifest_bytes=m.manifest_bytes,
    )


def compaction(m: rpc.CompactMemoryResponse) -> v.Compaction:
    return v.Compaction(
        dry_run=m.dry_run,
        entry_ids=tuple(m.entry_ids),
        reclaimed_bytes=m.reclaimed_bytes,
        revision=m.revision,
        capacity=capacity(m.capacity),
    )


def capabilities(m: rpc.GetCapabilitiesResponse) -> v.MemoryCapabilities:
    b = m.capacity_budget
    return v.MemoryCapabilities(
        max_entry_size_bytes=m.max_entry_size_bytes,
        search_modes=tuple(SEARCH_MODES.required(mode) for mode in m.search.search_modes),
        default_token_counter=TOKEN_COUNTERS.required(m.injection_budget.default_token_counter),
        capacity_budget=v.CapacityBudget(
            b.max_active_entries, b.max_manifest_entries, b.max_manifest_bytes
        ),
        compaction_enabled=m.compaction.enabled,
        min_tombstone_revisions=m.compaction.min_tombstone_revisions,
        max_history_revisions=m.max_history_revisions,
        capabilities_json=m.capabilities_json,
    )
