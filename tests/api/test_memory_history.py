"""Acceptance 6 and the exact-revision reads: bounded history, changes, versions, citations."""

from __future__ import annotations

import asyncpg
import grpc
from google.rpc import error_details_pb2

from ration.memory.v1 import memory_pb2
from tests.support.errors import rpc_error
from tests.support.ids import new_id
from tests.support.memory import Memory, pb
from tests.support.servers import StartServer


async def grow(memory: Memory, revisions: int) -> None:
    for n in range(revisions):
        await memory.append(f"note {n}")


async def test_100_revisions_read_in_one_window_and_101_are_refused(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/long"))
    await grow(memory, 150)

    window = await memory.revisions(0, 100)
    assert [r.revision for r in window] == list(range(1, 101))
    sample = window[41]
    capacity = await memory.capacity(sample.revision)
    assert (sample.operation, sample.change_count) == ("append", 1)
    assert (sample.active_entry_count, sample.manifest_bytes) == (
        capacity.active_entry_count,
        capacity.manifest_bytes,
    )

    for since, through in ((0, 101), (0, 0), (10, 150)):
        error = await rpc_error(memory.revisions(since, through))
        assert (error.code, error.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "HISTORY_WINDOW_EXCEEDED",
        )
        requested = (through or 150) - since
        assert error.metadata == {"requested": str(requested), "limit": "100"}

    # A longer history stays readable in bounded windows.
    assert [r.revision for r in await memory.revisions(0, 1)] == [1]
    assert [r.revision for r in await memory.revisions(50)] == list(range(51, 151))
    assert [r.revision for r in await memory.revisions(149, 150)] == [150]
    assert await memory.revisions(7, 7) == []


async def test_history_window_is_refused_before_anything_is_loaded(
    start_server: StartServer,
) -> None:
    runner = await start_server("memory", RATION_MEMORY_MAX_HISTORY_REVISIONS="5")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        # The refusal does not even need the memory to exist: nothing was read.
        error = await rpc_error(Memory(channel, "history/none").revisions(0, 6))
        assert error.metadata == {"requested": "6", "limit": "5"}
        memory = Memory(channel, "history/short")
        await grow(memory, 6)
        assert len(await memory.revisions(1, 6)) == 5
        assert (await rpc_error(memory.revisions())).reason == "HISTORY_WINDOW_EXCEEDED"


async def test_invalid_history_bounds_are_invalid_argument(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/bounds"))
    await grow(memory, 5)
    for since, through, field in (
        (-1, 3, "since"),
        (0, -1, "through"),
        (4, 2, "through"),
        (0, 9, "through"),  # beyond the head
        (6, 0, "since"),  # after the head (0 = the head)
    ):
        error = await rpc_error(memory.revisions(since, through))
        assert (error.code, error.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "VALIDATION_FAILED",
        )
        violations = error.require(error_details_pb2.BadRequest).field_violations
        assert [v.field for v in violations] == [field], (since, through)


async def test_changes_page_through_one_revision_or_everything_since(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/changes"))
    first = await memory.append(*(f"entry {n}" for n in range(5)))
    ids = sorted((e.entry_id for e in first.entries), key=str.encode)
    await memory.forget(ids[0], ids[1], reason="stale")
    await memory.append("late")

    async def pages(**selector: int) -> list[list[memory_pb2.Change]]:
        found, token = [], ""
        while True:
            request = pb.GetChangesRequest(
                memory_ref=memory.ref, page_size=2, page_token=token, **selector
            )
            reply = await memory.stub.GetChanges(request)
            found.append(list(reply.changes))
            if not (token := reply.next_page_token):
                return found

    one = await pages(revision=1)
    assert [len(p) for p in one] == [2, 2, 1]
    assert [c.entry_id for p in one for c in p] == ids
    assert all(c.op == memory_pb2.CHANGE_OP_ADD for p in one for c in p)

    since = [c for p in await pages(since=1) for c in p]
    assert [(c.revision, c.op, c.reason) for c in since] == [
        (2, memory_pb2.CHANGE_OP_DEACTIVATE, "stale"),
        (2, memory_pb2.CHANGE_OP_DEACTIVATE, "stale"),
        (3, memory_pb2.CHANGE_OP_ADD, ""),
    ]
    everything = [c for p in await pages(since=0) for c in p]
    assert len(everything) == 8

    missing = await rpc_error(
        memory.stub.GetChanges(pb.GetChangesRequest(memory_ref=memory.ref, revision=4))
    )
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "REVISION_NOT_FOUND")
    bad_token = pb.GetChangesRequest(memory_ref=memory.ref, since=0, page_token="nope")
    assert (await rpc_error(memory.stub.GetChanges(bad_token))).reason == "VALIDATION_FAILED"


async def test_capacity_of_a_past_revision_and_of_one_that_does_not_exist(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/capacity"))
    first = await memory.append("one", "two")
    await memory.forget(first.entries[0].entry_id)
    past = await memory.capacity(1)
    assert (past.revision, past.active_entry_count, past.manifest_entry_count) == (1, 2, 2)
    assert past.manifest_bytes == first.result.capacity.manifest_bytes
    error = await rpc_error(memory.capacity(3))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "REVISION_NOT_FOUND")
    assert (await rpc_error(memory.capacity(0))).reason == "VALIDATION_FAILED"


async def test_citations_resolve_against_the_exact_revision_they_name(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/cite"))
    original = (await memory.append("the sky is green")).entries[0]
    revised = (await memory.revise(original.entry_id, "the sky is blue", reason="fix")).entry
    assert (revised.version, revised.previous_version_id) == (2, original.entry_version_id)

    assert (await memory.cite(1, original.entry_id, original.entry_version_id)).valid
    assert not (await memory.cite(2, original.entry_id, original.entry_version_id)).valid
    assert (await memory.cite(2, revised.entry_id, revised.entry_version_id)).valid
    assert not (await memory.cite(1, revised.entry_id, revised.entry_version_id)).valid
    assert not (await memory.cite(9, revised.entry_id, revised.entry_version_id)).valid
    malformed = await rpc_error(memory.cite(1, "mem_ent_nope", original.entry_version_id))
    assert malformed.reason == "VALIDATION_FAILED"


async def test_entry_versions_are_readable_until_they_expire(
    shared_memory_channel: grpc.aio.Channel, shared_db: asyncpg.Connection
) -> None:
    memory = Memory(shared_memory_channel, new_id("history/versions"))
    stored = (await memory.append("kept")).entries[0]
    assert await memory.version(stored.entry_version_id) == stored
    for unknown in ("mem_ver_" + "0" * 32, "not-an-id"):
        error = await rpc_error(memory.version(unknown))
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "ENTRY_NOT_FOUND")
    # Time passes (no sleeping): the stored expiry moves into the past.
    await shared_db.execute(
        "UPDATE memory.entry_versions SET expires_at = now() - interval '1 second'"
        " WHERE entry_version_id = $1",
        stored.entry_version_id,
    )
    assert (await rpc_error(memory.version(stored.entry_version_id))).reason == "ENTRY_NOT_FOUND"
