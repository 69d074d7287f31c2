"""Acceptance 5: compaction previews, eligibility, recovery, citations, conflicts and bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import grpc
import pytest

from ration.memory.v1 import memory_pb2
from tests.support.errors import rpc_error
from tests.support.memory import Memory, entry, row_counts
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

ENABLED = {"RATION_MEMORY_COMPACTION_ENABLED": "true"}
AGE_ZERO = {**ENABLED, "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS": "0"}

OpenChannel = Callable[..., Awaitable[grpc.aio.Channel]]


@pytest.fixture
async def open_channel(start_server: StartServer) -> AsyncIterator[OpenChannel]:
    """Starts a memory server with the given environment and returns a channel to it."""
    channels: list[grpc.aio.Channel] = []

    async def open_(**env: str) -> grpc.aio.Channel:
        runner = await start_server("memory", **env)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}")
        channels.append(channel)
        return channel

    yield open_
    for channel in channels:
        await channel.close()


async def tombstones(memory: Memory, count: int, **fields: object) -> list[memory_pb2.EntryVersion]:
    """Appends `count` entries and forgets them all; returns their versions."""
    added = list((await memory.append(*(entry(f"t {n}", **fields) for n in range(count)))).entries)
    await memory.forget(*(e.entry_id for e in added))
    return added


async def test_dry_run_equals_the_real_run_and_drops_in_entry_id_order_with_limit(
    open_channel: OpenChannel, db: asyncpg.Connection
) -> None:
    memory = Memory(await open_channel(**AGE_ZERO), "compact/plan")
    await memory.append("kept active")
    dropped = await tombstones(memory, 5)
    head = await memory.head()
    before = await memory.capacity()
    assert before.compactable_entry_count == 5

    preview = await memory.compact(dry_run=True, limit=3, reason="tidy")
    ordered = sorted((e.entry_id for e in dropped), key=str.encode)
    assert preview.dry_run
    assert list(preview.entry_ids) == ordered[:3]
    assert preview.revision == head
    assert await memory.head() == head  # a preview writes nothing

    real = await memory.compact(limit=3, reason="tidy", expected_revision=head)
    assert not real.dry_run
    assert list(real.entry_ids) == list(preview.entry_ids)
    assert real.reclaimed_bytes == preview.reclaimed_bytes
    assert real.revision == head + 1
    assert real.reclaimed_bytes == before.manifest_bytes - real.capacity.manifest_bytes
    assert real.capacity.manifest_entry_count == before.manifest_entry_count - 3
    assert real.capacity.compactable_entry_count == 2

    versions = {e.entry_id: e.entry_version_id for e in dropped}
    changes = await memory.changes(real.revision)
    assert [
        (c.op, c.entry_id, c.from_entry_version_id, c.to_entry_version_id, c.reason)
        for c in changes
    ] == [(memory_pb2.CHANGE_OP_COMPACT, i, versions[i], "", "tidy") for i in ordered[:3]]
    # Bodies and past revisions stay: every dropped version is still readable.
    for entry_id in ordered[:3]:
        assert (await memory.version(versions[entry_id])).content.startswith("t ")
    assert (await memory.capacity(head)).manifest_bytes == before.manifest_bytes
    stored = await db.fetchval("SELECT count(*) FROM memory.entry_versions")
    assert stored == 6


async def test_tagged_and_recently_retired_tombstones_are_kept(
    open_channel: OpenChannel,
) -> None:
    memory = Memory(await open_channel(**ENABLED), "compact/eligibility")
    old = await tombstones(memory, 1)  # retired at revision 2
    tagged = await tombstones(memory, 1, tags=["legal-hold"])  # retired at revision 4
    restarted = await tombstones(memory, 1)  # retired at 6, reactivated and retired again below
    for n in range(7):
        await memory.append(f"filler {n}")  # revisions 7..13
    await memory.reactivate(restarted[0].entry_id)  # 14: the window restarts
    await memory.forget(restarted[0].entry_id)  # 15
    recent = await tombstones(memory, 1)  # retired at 17
    assert await memory.head() == 17

    preview = await memory.compact(dry_run=True)
    # Only the untagged tombstone retired 10+ revisions ago qualifies (2 <= 17 - 10).
    assert list(preview.entry_ids) == [old[0].entry_id]
    assert (await memory.capacity()).compactable_entry_count == 1
    real = await memory.compact(expected_revision=17)
    assert list(real.entry_ids) == [old[0].entry_id]
    assert {e.entry_id for e in (*tagged, *restarted, *recent)}.isdisjoint(real.entry_ids)


async def test_memory_refused_for_manifest_entries_recovers_after_compaction_with_age_zero(
    start_server: StartServer,
) -> None:
    budget = {"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "3", "RATION_MEMORY_MAX_MANIFEST_ENTRIES": "4"}
    runner = await start_server("memory", **budget, **ENABLED)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "compact/recover")
        await tombstones(memory, 2)
        await memory.append("a", "b")  # active 2, manifest 4: full
        error = await rpc_error(memory.append("c"))
        assert error.metadata == {"dimension": "manifest_entries", "limit": "4", "observed": "5"}
        # The tombstones are too recent for the default 10-revision window.
        assert list((await memory.compact(dry_run=True)).entry_ids) == []
    await runner.stop()

    runner = await start_server(
        "memory", **budget, **ENABLED, RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, memory.ref)
        compacted = await memory.compact(expected_revision=await memory.head())
        assert len(compacted.entry_ids) == 2
        assert compacted.capacity.manifest_entry_count == 2
        appended = await memory.append("c")
        assert appended.result.capacity.manifest_entry_count == 3


async def test_compacted_entry_keeps_its_citations_but_cannot_come_back(
    open_channel: OpenChannel,
) -> None:
    memory = Memory(await open_channel(**AGE_ZERO), "compact/citations")
    added = (await memory.append("cited fact")).entries[0]
    forgotten = await memory.forget(added.entry_id)
    compacted = await memory.compact(expected_revision=forgotten.result.revision)
    assert list(compacted.entry_ids) == [added.entry_id]

    for revision, state in (
        (1, memory_pb2.ENTRY_STATE_ACTIVE),
        (2, memory_pb2.ENTRY_STATE_INACTIVE),
    ):
        cited = await memory.cite(revision, added.entry_id, added.entry_version_id)
        assert (cited.valid, cited.state) == (True, state)
    assert not (await memory.cite(3, added.entry_id, added.entry_version_id)).valid
    assert (await memory.version(added.entry_version_id)).content == "cited fact"

    for call in (
        memory.reactivate(added.entry_id),
        memory.forget(added.entry_id),
        memory.revise(added.entry_id, "again"),
    ):
        error = await rpc_error(call)
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "ENTRY_NOT_FOUND")


async def test_compacting_a_stale_head_is_a_revision_conflict_and_writes_nothing(
    open_channel: OpenChannel, db: asyncpg.Connection
) -> None:
    memory = Memory(await open_channel(**AGE_ZERO), "compact/stale")
    await tombstones(memory, 2)
    preview = await memory.compact(dry_run=True)
    await memory.append("meanwhile")
    rows = await row_counts(db)
    error = await rpc_error(memory.compact(expected_revision=preview.revision))
    assert (error.code, error.reason) == (grpc.StatusCode.ABORTED, "REVISION_CONFLICT")
    assert error.metadata == {"expected": "2", "actual": "3"}
    missing = await rpc_error(memory.compact())
    assert missing.reason == "VALIDATION_FAILED"
    assert await row_counts(db) == rows


async def test_real_compaction_while_disabled_is_refused_but_previews_work(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, "compact/disabled")
    await tombstones(memory, 1)
    assert list((await memory.compact(dry_run=True)).entry_ids) == []  # age 10: too recent
    rows = await row_counts(db)
    error = await rpc_error(memory.compact(expected_revision=2))
    assert (error.code, error.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "COMPACTION_DISABLED",
    )
    assert await row_counts(db) == rows


async def test_reclaimed_bytes_is_negative_with_a_long_reason_and_zero_for_a_no_op(
    open_channel: OpenChannel,
) -> None:
    memory = Memory(await open_channel(**AGE_ZERO), "compact/bytes")
    await tombstones(memory, 2)
    await memory.append("a short head revision: one add change")
    head = await memory.capacity()
    # Each drop removes a 224-byte item but records a change carrying the 256-character reason,
    # and the head's own (short) changes are not repeated: the content grows.
    long_reason = "because " * 32
    preview = await memory.compact(dry_run=True, reason=long_reason)
    assert preview.reclaimed_bytes < 0
    real = await memory.compact(reason=long_reason, expected_revision=head.revision)
    assert real.reclaimed_bytes == preview.reclaimed_bytes
    assert real.capacity.manifest_bytes == head.manifest_bytes - real.reclaimed_bytes
    assert real.capacity.manifest_entry_count == 1

    noop = await memory.compact(reason="nothing left", expected_revision=real.revision)
    assert (list(noop.entry_ids), noop.reclaimed_bytes, noop.revision) == ([], 0, real.revision)
    assert await memory.head() == real.revision  # no revision was created


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    roles = {"reader": ["reader"], "writer": ["writer"], "admin": ["admin"]}
    rows = [(f"{name}-token", "acme", granted) for name, granted in roles.items()]
    return write_token_file(tmp_path / "tokens.json", *rows)


async def test_dry_run_needs_reader_and_a_real_run_needs_admin(
    start_server: StartServer, token_file: Path
) -> None:
    runner = await start_server("memory", RATION_TOKEN_FILE=str(token_file), **AGE_ZERO)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        writer = Memory(channel, "compact/roles", token="writer-token")
        await tombstones(writer, 1)
        reader = Memory(channel, writer.ref, token="reader-token")
        assert len((await reader.compact(dry_run=True)).entry_ids) == 1
        for caller in (reader, writer):
            error = await rpc_error(caller.compact(expected_revision=2))
            assert (error.code, error.reason) == (
                grpc.StatusCode.PERMISSION_DENIED,
                "ROLE_REQUIRED",
            )
            assert error.metadata == {"role": "admin"}
        admin = Memory(channel, writer.ref, token="admin-token")
        assert len((await admin.compact(expected_revision=2)).entry_ids) == 1
