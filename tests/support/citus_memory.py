"""Every memory RPC against a running memory service (e.g. on Citus), with the answers checked.

`exercise_memory(address, token, other_token)` writes, reads, replays, compacts and refuses on
fresh memory refs (so it can run again on the same database) and raises AssertionError, or the
call's error, on the first wrong answer. The service must run with `SERVICE_ENV` (compaction on,
no age window, a small active-entry budget) and, for `token`, a role that may commit compaction
(admin); `other_token`, of another tenant, checks tenant isolation.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest

from ration.memory.v1 import memory_pb2
from ration_client import Rank, SearchMode, StoppedBy
from ration_client.errors import RationError
from ration_client.memory import MemoryClient
from tests.support import token_files
from tests.support.errors import rpc_error
from tests.support.memory import Memory, entry, request_id

# What the exercise needs of the service's configuration (added to its environment).
SERVICE_ENV = {
    "RATION_MEMORY_COMPACTION_ENABLED": "true",
    "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS": "0",
    "RATION_MEMORY_MAX_ACTIVE_ENTRIES": "12",
}
SECRET = "sk-citus-0123456789abcdef"
# The exercise's two tenants, each with an admin token (`token`, `other_token`).
TOKENS = {"alpha-admin": "alpha", "beta-admin": "beta"}
CONCURRENT = 8


def write_token_file(path: Path, tokens: dict[str, str] | None = None) -> Path:
    """A RATION_TOKEN_FILE with admin tokens (token: tenant), the exercise's two by default."""
    given = TOKENS if tokens is None else tokens
    return token_files.write_token_file(path, *[(t, n, ["admin"]) for t, n in given.items()])


async def exercise_memory(address: str, token: str | None, other_token: str | None = None) -> None:
    """Drives every memory RPC through MemoryClient (and the stub for the rest); see module."""
    prefix = f"citus-{uuid.uuid4().hex[:8]}"
    async with (
        MemoryClient(address, token=token) as client,
        grpc.aio.insecure_channel(address) as channel,
    ):
        await _writes_and_reads(client, Memory(channel, f"{prefix}/notes", token))
        await _compaction(client, Memory(channel, f"{prefix}/compact", token))
        await _capacity_refusal(client, f"{prefix}/full")
        await _replays(client, f"{prefix}/replays")
        await _concurrent_writers(client, Memory(channel, f"{prefix}/busy", token))
        if other_token is not None:
            async with MemoryClient(address, token=other_token) as other:
                await _isolation(client, other, f"{prefix}/private")


async def _writes_and_reads(client: MemoryClient, memory: Memory) -> None:
    ref = memory.ref
    appended = await client.append(
        ref,
        [
            entry(f"the deploy key is {SECRET}, keep it safe", kind="fact", tags=["ops"]),
            entry("pelicans nest on the eastern shore every spring", tags=["birds"]),
            entry("the release train leaves on thursdays"),
        ],
        secrets={"deploy": SECRET},
    )
    assert appended.revision == 1, appended
    stored = [e.content for e in appended.entries]
    assert SECRET not in " ".join(stored), stored
    assert stored[0] == "the deploy key is [REDACTED:deploy], keep it safe", stored
    assert appended.redactions == {"deploy": 1}, appended.redactions
    ids = [e.entry_id for e in appended.entries]

    everything = await client.list(ref, token_budget=10_000)
    assert everything.revision == 1
    assert {e.entry_id for e in everything.entries} == set(ids), everything
    assert everything.stopped_by is StoppedBy.NONE
    assert SECRET not in str(everything)
    smallest = min(e.size for e in everything.entries)
    tight = await client.list(ref, token_budget=smallest)
    assert len(tight.entries) <= 1, tight
    assert tight.stopped_by is StoppedBy.BUDGET, tight
    assert tight.total_tokens <= smallest
    tagged = await client.list(ref, tag="birds")
    assert [e.entry_id for e in tagged.entries] == [ids[1]], tagged
    relevant = await client.list(ref, rank=Rank.RELEVANCE, query="pelicans nest")
    assert relevant.entries[0].entry_id == ids[1], relevant
    found = await client.search(ref, "where do pelicans nest", limit=3)
    assert found.hits[0].entry.entry_id == ids[1], found
    filtered = await client.search(ref, "", mode=SearchMode.FILTER)
    assert {h.entry.entry_id for h in filtered.hits} == set(ids), filtered

    version = await memory.version(appended.entries[0].entry_version_id)
    assert (version.content, version.kind) == (stored[0], "fact"), version
    revised = await memory.revise(ids[2], "the release train leaves on fridays", reason="moved")
    assert (revised.result.revision, revised.entry.version) == (2, 2), revised
    forgot = await client.forget(ref, [ids[0]], reason=f"rotated {SECRET}", secrets={"d": SECRET})
    assert forgot.revision == 3, forgot
    assert [c.reason for c in forgot.changes] == ["rotated [REDACTED:d]"], forgot
    after = await client.list(ref)
    assert {e.entry_id for e in after.entries} == {ids[1], ids[2]}, after
    reactivated = await memory.reactivate(ids[0])
    assert reactivated.result.revision == 4, reactivated
    stale = await rpc_error(memory.append("late", expected_revision=1))
    assert stale.reason == "REVISION_CONFLICT", stale

    await _history(client, memory, ids, [e.entry_version_id for e in appended.entries])


async def _history(
    client: MemoryClient, memory: Memory, ids: list[str], versions: list[str]
) -> None:
    revisions = await memory.revisions()
    assert [r.revision for r in revisions] == [1, 2, 3, 4], revisions
    assert [r.revision_operation for r in revisions] == [
        memory_pb2.REVISION_OPERATION_APPEND,
        memory_pb2.REVISION_OPERATION_REVISE,
        memory_pb2.REVISION_OPERATION_FORGET,
        memory_pb2.REVISION_OPERATION_REACTIVATE,
    ]
    changes = await memory.changes(3)
    assert [(c.op, c.entry_id) for c in changes] == [(memory_pb2.CHANGE_OP_DEACTIVATE, ids[0])]
    at_forget = await client.list(memory.ref, revision=3)
    assert {e.entry_id for e in at_forget.entries} == {ids[1], ids[2]}, at_forget
    first = await client.list(memory.ref, revision=1)
    assert "thursdays" in " ".join(e.content for e in first.entries), first
    past = await client.capacity(memory.ref, revision=3)
    assert (past.active_entry_count, past.manifest_entry_count) == (2, 3), past
    cited = await memory.cite(3, ids[0], versions[0])
    assert (cited.valid, cited.state) == (True, memory_pb2.ENTRY_STATE_INACTIVE), cited
    superseded = await memory.cite(2, ids[2], versions[2])
    assert not superseded.valid, superseded  # revision 2 revised it


async def _compaction(client: MemoryClient, memory: Memory) -> None:
    ref = memory.ref
    appended = await client.append(ref, ["same words", "same words", "tombstone to be", "kept"])
    ids = [e.entry_id for e in appended.entries]
    deduped = await memory.dedupe()
    (duplicate,) = deduped.deactivated_entry_ids
    assert duplicate in ids[:2], deduped
    await client.forget(ref, [ids[2]])
    tombstones = sorted([duplicate, ids[2]])
    preview = await memory.compact(dry_run=True)
    assert preview.dry_run, preview
    assert sorted(preview.entry_ids) == tombstones, preview
    head = preview.revision
    compacted = await memory.compact(reason="tidy", expected_revision=head)
    assert sorted(compacted.entry_ids) == tombstones, compacted
    assert compacted.revision == head + 1, compacted
    assert compacted.reclaimed_bytes > 0, compacted
    capacity = await client.capacity(ref)
    assert (capacity.active_entry_count, capacity.manifest_entry_count) == (2, 2), capacity
    assert capacity.compactable_entry_count == 0, capacity
    again = await rpc_error(memory.reactivate(ids[2]))
    assert again.code == grpc.StatusCode.NOT_FOUND, again  # compacted ids are gone for good


async def _capacity_refusal(client: MemoryClient, ref: str) -> None:
    first = await client.append(ref, ["entry 0"])
    budget = first.capacity.budget.max_active_entries
    assert budget <= 100, f"start the service with {SERVICE_ENV} (max active {budget})"
    await client.append(ref, [f"entry {i}" for i in range(1, budget)])
    with pytest.raises(RationError) as refused:
        await client.append(ref, ["one too many"])
    assert refused.value.reason == "MEMORY_CAPACITY_EXCEEDED", refused.value
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION, refused.value
    capacity = await client.capacity(ref)
    assert (capacity.revision, capacity.active_entry_count) == (2, budget), capacity


async def _replays(client: MemoryClient, ref: str) -> None:
    """Replays of one request id, one after another and all at once: one effect, one answer."""
    rid = request_id()
    first = await client.append(ref, ["written once"], request_id=rid)
    again = await client.append(ref, ["written once"], request_id=rid)
    assert again == first
    with pytest.raises(RationError) as reused:
        await client.append(ref, ["something else"], request_id=rid)
    assert reused.value.reason == "REQUEST_ID_REUSED", reused.value
    rid = request_id()
    twins = await asyncio.gather(
        *(client.append(ref, ["raced"], request_id=rid) for _ in range(CONCURRENT))
    )
    assert all(t == twins[0] for t in twins), twins
    assert twins[0].revision == 2, twins[0]
    forgets = await asyncio.gather(
        *(client.forget(ref, [first.entries[0].entry_id], request_id=rid + "-f") for _ in range(4))
    )
    assert all(f == forgets[0] for f in forgets), forgets
    assert forgets[0].revision == 3, forgets[0]
    assert (await client.capacity(ref)).revision == 3


async def _concurrent_writers(client: MemoryClient, memory: Memory) -> None:
    """Distinct writes racing to create and extend one memory serialise on its head."""
    results = await asyncio.gather(
        *(client.append(memory.ref, [f"writer {i}"]) for i in range(CONCURRENT))
    )
    assert sorted(r.revision for r in results) == list(range(1, CONCURRENT + 1))
    listed = await client.list(memory.ref)
    assert (len(listed.entries), listed.revision) == (CONCURRENT, CONCURRENT), listed


async def _isolation(client: MemoryClient, other: MemoryClient, ref: str) -> None:
    """Another tenant neither sees nor touches this tenant's memory of the same ref."""
    mine = await client.append(ref, ["only for my tenant"])
    seen = await other.list(ref)
    assert (seen.revision, list(seen.entries)) == (0, []), seen
    with pytest.raises(RationError) as hidden:
        await other.capacity(ref)
    assert hidden.value.reason == "MEMORY_NOT_FOUND", hidden.value
    theirs = await other.append(ref, ["the other tenant's own"])
    assert theirs.revision == 1, theirs
    assert theirs.entries[0].entry_id != mine.entries[0].entry_id
    listed = await client.list(ref)
    assert [e.content for e in listed.entries] == ["only for my tenant"], listed
