"""MemoryClient returns typed views against a real server: StrEnums, datetimes, None for
absent values, and no protobuf message anywhere in what it returns."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.message import Message

from ration_client import (
    Capacity,
    CapacityDimension,
    ChangeOp,
    EntryInput,
    EntryState,
    EntryVersion,
    MemoryClient,
    MemoryList,
    Rank,
    RevisionOperation,
    SearchMode,
    StoppedBy,
    TokenCounter,
    WriteResult,
)
from tests.support.servers import StartServer

SECRET = "sk-live-views-0123456789"


@pytest.fixture
async def memory(start_server: StartServer) -> AsyncIterator[MemoryClient]:
    runner = await start_server("memory")
    async with MemoryClient(f"127.0.0.1:{runner.port}") as client:
        yield client


def no_protobuf(value: Any) -> None:
    """Walks a view: every leaf is a plain Python value, never a protobuf message."""
    assert not isinstance(value, Message), value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            no_protobuf(getattr(value, f.name))
    elif isinstance(value, dict):
        for key, item in value.items():
            no_protobuf(key)
            no_protobuf(item)
    elif isinstance(value, tuple | list):
        for item in value:
            no_protobuf(item)


async def test_writes_return_typed_results_with_redaction_counts(memory: MemoryClient) -> None:
    expires = datetime.now(UTC) + timedelta(days=1)
    written = await memory.append(
        "views/1",
        [
            EntryInput(f"the key is {SECRET}", kind="fact", tags=("ops",), metadata={"k": "v"}),
            {"content": "expiring note", "expires_at": expires},
            "plain text",
        ],
        secrets={"deploy": SECRET},
    )
    no_protobuf(written)
    assert isinstance(written, WriteResult)
    assert written.revision == 1
    assert written.redactions == {"deploy": 1}
    assert [c.op for c in written.changes] == [ChangeOp.ADD] * 3
    first, expiring, plain = written.entries
    assert isinstance(first, EntryVersion)
    assert first.content == "the key is [REDACTED:deploy]"
    assert (first.kind, first.tags, first.metadata) == ("fact", ("ops",), {"k": "v"})
    assert first.previous_version_id == ""
    assert first.expires_at is None
    assert first.created_at.tzinfo is not None
    assert expiring.expires_at is not None
    assert abs(expiring.expires_at - expires) < timedelta(seconds=1)
    assert plain.sizes.chars == len("plain text")
    assert isinstance(written.capacity, Capacity)
    assert written.capacity.active_entry_count == 3
    assert written.capacity.exceeded == ()

    revised = await memory.revise("views/1", plain.entry_id, "plain text, revised")
    no_protobuf(revised)
    (version,) = revised.entries
    assert (version.version, version.previous_version_id) == (2, plain.entry_version_id)
    assert [c.op for c in revised.changes] == [ChangeOp.REVISE]

    forgot = await memory.forget(
        "views/1", [first.entry_id], reason=f"rotated {SECRET}", secrets={"deploy": SECRET}
    )
    assert [(c.op, c.reason) for c in forgot.changes] == [
        (ChangeOp.DEACTIVATE, "rotated [REDACTED:deploy]")
    ]
    cited = await memory.validate_citation(
        "views/1", forgot.revision, first.entry_id, first.entry_version_id
    )
    assert (cited.valid, cited.state) == (True, EntryState.INACTIVE)
    again = await memory.reactivate("views/1", [first.entry_id])
    assert [c.op for c in again.changes] == [ChangeOp.REACTIVATE]
    stored = await memory.entry_version("views/1", first.entry_version_id)
    assert stored == first


async def test_list_speaks_enums_and_none_for_no_budget(memory: MemoryClient) -> None:
    await memory.append("views/2", ["an older fact about pelicans", "a newer fact about trains"])
    everything = await memory.list("views/2")
    no_protobuf(everything)
    assert isinstance(everything, MemoryList)
    assert everything.stopped_by is StoppedBy.NONE
    assert everything.effective_token_budget is None
    assert everything.token_counter is TokenCounter.O200K_BASE
    assert everything.first_omitted_entry_id == ""

    tight = await memory.list(
        "views/2", token_budget=3, token_counter=TokenCounter.CHARS, rank=Rank.RECENCY
    )
    assert tight.stopped_by is StoppedBy.BUDGET
    assert str(tight.stopped_by) == "budget"
    assert (tight.token_counter, tight.effective_token_budget) == (TokenCounter.CHARS, 3)
    assert tight.entries == ()
    in_chars = await memory.list("views/2", token_counter=TokenCounter.CHARS)
    first = in_chars.entries[0]
    assert (tight.first_omitted_entry_id, tight.first_omitted_size) == (first.entry_id, first.size)
    assert first.size == len(first.content)

    relevant = await memory.list("views/2", rank=Rank.RELEVANCE, query="pelicans", limit=1)
    assert [e.content for e in relevant.entries] == ["an older fact about pelicans"]
    assert relevant.stopped_by is StoppedBy.LIMIT

    found = await memory.search("views/2", "trains")
    no_protobuf(found)
    assert found.hits[0].entry.content == "a newer fact about trains"
    assert found.stopped_by is StoppedBy.NONE
    filtered = await memory.search("views/2", mode=SearchMode.FILTER)
    assert [h.score for h in filtered.hits] == [0.0, 0.0]


async def test_capacity_names_exceeded_dimensions_as_enums(start_server: StartServer) -> None:
    runner = await start_server("memory", RATION_MEMORY_MAX_ACTIVE_ENTRIES="2")
    async with MemoryClient(f"127.0.0.1:{runner.port}") as memory:
        await memory.append("views/3", ["one", "two"])
        capacity = await memory.capacity("views/3")
    no_protobuf(capacity)
    assert capacity.budget.max_active_entries == 2
    assert capacity.exceeded == ()
    assert str(CapacityDimension.ACTIVE_ENTRIES) == "active_entries"


async def test_history_organize_compact_and_capabilities_are_typed(
    start_server: StartServer,
) -> None:
    runner = await start_server(
        "memory",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
    )
    async with MemoryClient(f"127.0.0.1:{runner.port}") as memory:
        written = await memory.append("views/4", ["same", "same", "other"])
        deduped = await memory.dedupe("views/4")
        (dropped,) = [c.entry_id for c in deduped.changes]
        assert [c.reason for c in deduped.changes] == ["dedupe"]
        revisions = await memory.revisions("views/4")
        no_protobuf(revisions)
        assert [r.operation for r in revisions] == [
            RevisionOperation.APPEND,
            RevisionOperation.ORGANIZE,
        ]
        changes = [c async for c in memory.changes("views/4")]
        assert [(c.revision, c.op) for c in changes] == [(1, ChangeOp.ADD)] * 3 + [
            (2, ChangeOp.DEACTIVATE)
        ]
        assert [c.entry_id async for c in memory.changes("views/4", revision=2)] == [dropped]
        preview = await memory.compact("views/4", dry_run=True)
        assert (preview.dry_run, preview.entry_ids) == (True, (dropped,))
        done = await memory.compact("views/4", expected_revision=preview.revision)
        no_protobuf(done)
        assert (done.revision, done.entry_ids) == (3, (dropped,))
        assert done.capacity.manifest_entry_count == 2
        assert dropped in {e.entry_id for e in written.entries}
        capabilities = await memory.capabilities()
    no_protobuf(capabilities)
    assert capabilities.compaction_enabled
    assert capabilities.default_token_counter is TokenCounter.O200K_BASE
    assert set(capabilities.search_modes) == {SearchMode.SEMANTIC, SearchMode.FILTER}
