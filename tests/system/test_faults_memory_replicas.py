"""Two memory replicas under concurrent compare-and-swap appends, one killed with SIGKILL.

Writers append to a few shared memories through both replicas, each naming the head it last
saw (`expected_revision`) and its own entry ids; a stale head is ABORTED REVISION_CONFLICT and
the writer moves on from the actual head. Mid-load one replica is killed without warning; a
writer whose call it took down retries the same request (same request_id) on the survivor,
so every request ends acknowledged or refused. Afterwards, per memory: the head manifest holds
exactly the acknowledged entries (none lost, none of a refused request), the revision chain is
1..head without gaps with one revision per acknowledged append, and GetCapacity's
manifest_bytes (and every sampled revision's stored bytes) equal the RFC 8785 length of the
manifest materialised from the store.
"""

from __future__ import annotations

import asyncio
import random
import signal
import uuid
from dataclasses import dataclass, field

import asyncpg
import grpc
import pytest

from ration.memory.v1 import memory_pb2, memory_service_pb2_grpc
from ration.memory.v1 import memory_service_pb2 as pb
from tests.support.audits import audit_memory
from tests.support.errors import decode
from tests.support.procs import BIN, Proc, clean_env
from tests.support.replicas import Replicas

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

MEMORIES = 3
WRITERS = 12
APPENDS = 10  # attempts per writer
PROGRESS = 30  # acknowledged appends before the kill
BOUND = 90.0


@dataclass
class Outcomes:
    acknowledged: dict[str, list[tuple[int, list[str]]]] = field(default_factory=dict)
    refused: dict[str, list[str]] = field(default_factory=dict)  # ref → entry ids never written
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    at_kill: int = 0

    def count(self) -> int:
        return sum(len(v) for v in self.acknowledged.values())


def new_entry_id() -> str:
    return "mem_ent_" + uuid.uuid4().hex


async def writer(index: int, replicas: Replicas, outcomes: Outcomes, rng: random.Random) -> None:
    ref = f"kill/{index % MEMORIES}"
    head = 0
    for step in range(APPENDS):
        ids = [new_entry_id() for _ in range(rng.randint(1, 2))]
        request = pb.AppendEntriesRequest(
            request_id=uuid.uuid4().hex,
            memory_ref=ref,
            entries=[
                memory_pb2.EntryInput(entry_id=i, content=f"writer {index} step {step} entry {i}")
                for i in ids
            ],
            expected_revision=head,
        )
        try:
            reply = await replicas.call(index, "AppendEntries", request, seconds=20)
        except grpc.aio.AioRpcError as error:
            details = decode(error)
            assert details.reason == "REVISION_CONFLICT", details
            head = int(details.metadata["actual"])
            outcomes.refused.setdefault(ref, []).extend(ids)
            continue
        head = reply.result.revision
        outcomes.acknowledged.setdefault(ref, []).append((head, ids))
        if outcomes.count() >= PROGRESS:
            outcomes.progress.set()


async def load(procs: list[Proc], database_url: str) -> Outcomes:
    replicas = Replicas(
        [p.addresses["memory"] for p in procs], memory_service_pb2_grpc.MemoryServiceStub
    )
    outcomes = Outcomes()
    rng = random.Random(113)

    async def kill() -> None:
        await outcomes.progress.wait()
        outcomes.at_kill = outcomes.count()
        procs[1].send(signal.SIGKILL)
        replicas.dead.add(1)

    killer = asyncio.create_task(kill())
    writers = [writer(i, replicas, outcomes, rng) for i in range(WRITERS)]
    await asyncio.wait_for(asyncio.gather(*writers), BOUND)
    assert killer.done(), "the load ended before the kill"

    async def head_bytes(ref: str) -> tuple[int, int]:
        reply = await replicas.call(0, "GetCapacity", pb.GetCapacityRequest(memory_ref=ref))
        return reply.capacity.revision, reply.capacity.manifest_bytes

    conn = await asyncpg.connect(database_url)
    try:
        for ref, acknowledged in outcomes.acknowledged.items():
            await check_memory(conn, replicas, ref, acknowledged, outcomes.refused.get(ref, []))
        await audit_memory(conn, head_bytes)
    finally:
        await conn.close()
    await replicas.close()
    return outcomes


async def check_memory(
    conn: asyncpg.Connection,
    replicas: Replicas,
    ref: str,
    acknowledged: list[tuple[int, list[str]]],
    refused: list[str],
) -> None:
    revisions = sorted(revision for revision, _ in acknowledged)
    assert revisions == list(range(1, len(acknowledged) + 1)), f"{ref}: {revisions}"
    head = await conn.fetchval(
        "SELECT head_revision FROM memory.memories WHERE memory_ref = $1", ref
    )
    assert head == len(acknowledged), f"{ref}: a revision nobody was told about"
    manifest = {
        r["entry_id"]: r["state"]
        for r in await conn.fetch(
            "SELECT i.entry_id, i.state FROM memory.manifest_items i JOIN memory.memories m"
            " USING (tenant_id, memory_id) WHERE m.memory_ref = $1 AND i.to_rev IS NULL",
            ref,
        )
    }
    written = {entry_id for _, ids in acknowledged for entry_id in ids}
    assert set(manifest) == written, f"{ref}: lost {written - set(manifest)}, extra " + str(
        set(manifest) - written
    )
    assert set(manifest.values()) == {"active"}
    assert not set(refused) & set(manifest)
    listed = await replicas.call(
        0, "ListRevisions", pb.ListRevisionsRequest(memory_ref=ref, since=0, through=head)
    )
    assert [r.revision for r in listed.revisions] == list(range(1, head + 1))


def test_memory_replica_killed_mid_append_loses_no_acknowledged_entry(database_url: str) -> None:
    env = clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_MEMORY_EMBEDDER="false",
        RATION_DB_POOL_MAX="10",
        RATION_LOG_LEVEL="WARNING",
    )
    procs = [Proc.start([str(BIN / "ration"), "memory", "serve"], env) for _ in range(2)]
    try:
        for proc in procs:
            proc.wait_for("ready:")
        outcomes = asyncio.run(load(procs, database_url))
        assert procs[1].popen.wait(timeout=30) == -signal.SIGKILL
        assert outcomes.count() > outcomes.at_kill >= PROGRESS, "no write after the kill"
        assert procs[0].stop(signal.SIGTERM) == 0, procs[0].stderr_tail()
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.stop(signal.SIGKILL)
