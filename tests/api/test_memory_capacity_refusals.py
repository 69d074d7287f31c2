"""Acceptance 3 and 4: deterministic refusal per dimension, and relief over a lowered budget."""

from __future__ import annotations

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from ration.memory.v1 import memory_pb2
from servicekit.server import ServiceRunner
from tests.support.errors import rpc_error
from tests.support.manifests import canonical_document
from tests.support.memory import Memory, entry, request_id, row_counts
from tests.support.servers import StartServer

LOWERED = {
    "RATION_MEMORY_MAX_ACTIVE_ENTRIES": "3",
    "RATION_MEMORY_MAX_MANIFEST_ENTRIES": "4",
    "RATION_MEMORY_MAX_MANIFEST_BYTES": "1024",
}
EXCEEDED_ALL = [
    memory_pb2.CAPACITY_DIMENSION_MANIFEST_BYTES,
    memory_pb2.CAPACITY_DIMENSION_MANIFEST_ENTRIES,
    memory_pb2.CAPACITY_DIMENSION_ACTIVE_ENTRIES,
]


def appended_bytes(existing: int, added: int) -> int:
    """Canonical bytes of a revision holding existing+added active items and `added` add changes,
    from the reference encoder with ids of the generated widths."""
    items = [
        {
            "entry_id": f"mem_ent_{n:032x}",
            "entry_version_id": f"mem_ver_{n:032x}",
            "entry_content_hash": "0" * 64,
            "state": "active",
        }
        for n in range(existing + added)
    ]
    changes = [
        {
            "entry_id": item["entry_id"],
            "op": "add",
            "from_entry_version_id": None,
            "to_entry_version_id": item["entry_version_id"],
            "reason": None,
        }
        for item in items[existing:]
    ]
    return len(canonical_document(items, changes))


async def channel_for(
    start_server: StartServer, **env: str
) -> tuple[ServiceRunner, grpc.aio.Channel]:
    runner = await start_server("memory", **env)
    return runner, grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}")


@pytest.mark.parametrize(
    ("env", "dimension", "limit", "observed"),
    [
        (
            {"RATION_MEMORY_MAX_MANIFEST_BYTES": "1024"},
            "manifest_bytes",
            1024,
            appended_bytes(1, 3),
        ),
        (
            {"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "2", "RATION_MEMORY_MAX_MANIFEST_ENTRIES": "2"},
            "manifest_entries",
            2,
            3,
        ),
        ({"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "2"}, "active_entries", 2, 3),
    ],
)
async def test_refusal_names_dimension_limit_observed_persists_nothing_and_repeats_identically(
    start_server: StartServer,
    db: asyncpg.Connection,
    env: dict[str, str],
    dimension: str,
    limit: int,
    observed: int,
) -> None:
    _, channel = await channel_for(start_server, **env)
    async with channel:
        memory = Memory(channel, "capacity/refusal")
        first = await memory.append("one")
        if dimension == "manifest_entries":
            second = await memory.append("two")
            await memory.forget(second.entries[0].entry_id)  # active 1, manifest 2
            batch = ["three"]
        else:
            batch = ["two", "three", "four"] if dimension == "manifest_bytes" else ["two", "x"]
        head_before = await memory.head()
        rows_before = await row_counts(db)

        rid = request_id()
        errors = [await rpc_error(memory.append(*batch, rid=rid)) for _ in range(2)]
        errors.append(await rpc_error(memory.append(*batch)))  # a fresh request_id alike
        for error in errors:
            assert error.code == grpc.StatusCode.FAILED_PRECONDITION
            assert error.reason == "MEMORY_CAPACITY_EXCEEDED"
            assert error.metadata == {
                "dimension": dimension,
                "limit": str(limit),
                "observed": str(observed),
            }
            violation = error.require(error_details_pb2.PreconditionFailure).violations[0]
            assert violation.subject == dimension
        assert errors[0] == errors[1] == errors[2]
        assert await memory.head() == head_before
        assert await row_counts(db) == rows_before
        assert first.result.capacity.exceeded == []


async def test_refused_first_write_creates_no_memory(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    _, channel = await channel_for(start_server, RATION_MEMORY_MAX_ACTIVE_ENTRIES="2")
    async with channel:
        memory = Memory(channel, "capacity/never")
        error = await rpc_error(memory.append("a", "b", "c"))
        assert error.metadata["dimension"] == "active_entries"
        assert (await rpc_error(memory.capacity())).reason == "MEMORY_NOT_FOUND"
    assert set((await row_counts(db)).values()) == {0}


async def test_over_a_lowered_budget_only_growth_of_a_breached_dimension_is_refused(
    start_server: StartServer,
) -> None:
    runner, channel = await channel_for(start_server)
    async with channel:
        revised = Memory(channel, "lowered/revise")
        added = await revised.append(*(f"fact {n}" for n in range(5)))
        ids = [e.entry_id for e in added.entries]
        reactivated = Memory(channel, "lowered/reactivate")
        tomb = [e.entry_id for e in (await reactivated.append(*"abcde")).entries]
        await reactivated.forget(tomb[0], tomb[1])  # active 3, manifest 5
        deduped = Memory(channel, "lowered/dedupe")
        dup = [e.entry_id for e in (await deduped.append("same", "same", "other", "other")).entries]
        await deduped.revise(dup[2], "other")  # a one-change head: dedupe will grow the bytes
    await runner.stop()

    _, channel = await channel_for(start_server, **LOWERED)
    async with channel:
        revised, reactivated, deduped = (
            Memory(channel, m.ref) for m in (revised, reactivated, deduped)
        )
        base = await revised.capacity()
        assert list(base.exceeded) == EXCEEDED_ALL

        # Revising keeps both counts, and a short change record shrinks the bytes: accepted.
        smaller = await revised.revise(ids[0], "fact 0, corrected")
        assert smaller.result.capacity.manifest_bytes < base.manifest_bytes
        assert smaller.result.capacity.active_entry_count == 5
        # A long reason makes the bytes grow past the (breached) limit: refused, naming it.
        error = await rpc_error(revised.revise(ids[1], "fact 1, corrected", reason="r" * 200))
        assert error.reason == "MEMORY_CAPACITY_EXCEEDED"
        assert error.metadata["dimension"] == "manifest_bytes"
        assert error.metadata["limit"] == "1024"
        assert int(error.metadata["observed"]) > smaller.result.capacity.manifest_bytes
        assert (await rpc_error(revised.append("more"))).metadata["dimension"] == "manifest_bytes"
        # Forget is relief: always accepted.
        forgot = await revised.forget(ids[2], reason="f" * 200)
        assert forgot.result.capacity.active_entry_count == 4

        # Reactivation checks active entries only: refused at 4 > 3 (not for the bytes) ...
        before = await reactivated.capacity()
        assert list(before.exceeded) == EXCEEDED_ALL[:2]
        error = await rpc_error(reactivated.reactivate(tomb[0], reason="y" * 200))
        assert error.metadata == {"dimension": "active_entries", "limit": "3", "observed": "4"}
        # ... and accepted at 3 even though the bytes, already over, grow further.
        await reactivated.forget(tomb[2])
        base = await reactivated.capacity()
        back = await reactivated.reactivate(tomb[0], reason="y" * 200)
        after = back.result.capacity
        assert after.active_entry_count == 3
        assert after.manifest_bytes > base.manifest_bytes > 1024
        assert after.manifest_entry_count == 5 > 4

        # Dedupe is relief: accepted over budget even when its changes grow the bytes.
        base = await deduped.capacity()
        organized = await deduped.dedupe()
        assert len(organized.deactivated_entry_ids) == 2
        assert organized.result.capacity.manifest_bytes > base.manifest_bytes > 1024
        await channel.close()


async def test_capacity_reports_exceeded_in_the_fixed_order(start_server: StartServer) -> None:
    runner, channel = await channel_for(start_server)
    async with channel:
        memory = Memory(channel, "lowered/report")
        await memory.append(*(entry(f"entry {n}") for n in range(5)))
    await runner.stop()
    _, channel = await channel_for(start_server, RATION_MEMORY_MAX_ACTIVE_ENTRIES="4")
    async with channel:
        capacity = await Memory(channel, memory.ref).capacity()
        assert list(capacity.exceeded) == [memory_pb2.CAPACITY_DIMENSION_ACTIVE_ENTRIES]
        assert capacity.budget.max_active_entries == 4
