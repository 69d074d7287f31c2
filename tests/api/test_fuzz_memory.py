"""Fuzzing the memory service: hostile messages and mangled bytes for every RPC.

As for the budget service (test_fuzz_budget.py): requests built from the proto descriptors
with arbitrary, nasty and plausible values (the seeded memory's refs, entry and version ids,
tags, revisions), raw calls with random or mangled bytes. The server runs with its embedder,
compaction enabled and a small capacity budget, so relevance reads, compaction and capacity
refusals are reached too.

Every answer must be OK or a documented code with its ErrorInfo (never INTERNAL, UNKNOWN or a
hang); no refusal writes anything (a refused write is checked on the fully prepared revision
before anything is written); the server stays SERVING throughout.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from ration.memory.v1 import memory_service_pb2
from servicekit.timestamps import MAX_SECONDS, MIN_SECONDS
from tests.support.errors import rpc_error
from tests.support.fuzz import (
    FUZZ,
    Hints,
    Served,
    Target,
    connected,
    hostile_requests,
    mangled_bytes,
    serve,
)
from tests.support.memory import Memory, entry, request_id

MEMORY = Target(
    memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"],
    schema="memory",
    domain="ration.memory.v1",
)
RUN_SECRET = "hunter2-but-longer"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def served(pg_server_url: str, template_database: str) -> Iterator[Served]:
    with serve(
        "memory",
        MEMORY,
        pg_server_url,
        template_database,
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
        RATION_MEMORY_MAX_ACTIVE_ENTRIES="12",
        RATION_MEMORY_MAX_MANIFEST_ENTRIES="24",
        RATION_MEMORY_MAX_ENTRY_BYTES="4096",
        RATION_MEMORY_MAX_BATCH_ENTRIES="8",
        RATION_MEMORY_MAX_HISTORY_REVISIONS="5",
    ) as served:
        yield served


@pytest.fixture
async def channel(served: Served) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(served.server.address) as channel:
        yield channel


@pytest.fixture
async def conn(served: Served) -> AsyncIterator[asyncpg.Connection]:
    async with connected(served) as connection:
        yield connection


@pytest.fixture
async def hints(channel: grpc.aio.Channel) -> Hints:
    """A fresh memory for each RPC's fuzzing to aim at: active and forgotten entries over a
    few revisions, tagged and not, with a redacted secret."""
    ref = f"fz/{request_id()}"
    memory = Memory(channel, ref)
    first = await memory.append(
        entry("the user prefers metric units", kind="fact", tags=["keep"]),
        entry("deploys happen on Tuesdays", metadata={"source": "chat"}),
        entry(f"the staging password is {RUN_SECRET}"),
        secrets={"run-secret": RUN_SECRET},
    )
    second = await memory.append(entry("deploys happen on Tuesdays"), entry("Café au lait 🎉"))
    stored = [*first.entries, *second.entries]
    await memory.forget(stored[1].entry_id, reason="stale")
    now = int(time.time())
    return Hints(
        strings={
            "memory_ref": [ref, ref, ref, "fz/absent"],
            "entry_id": [e.entry_id for e in stored],
            "entry_ids": [e.entry_id for e in stored],
            "entry_version_id": [e.entry_version_id for e in stored],
            "content": ["a new fact", "deploys happen on Tuesdays", f"key {RUN_SECRET}"],
            "kind": ["", "fact"],
            "tags": ["keep", "t1"],
            "tag": ["", "keep"],
            "key": ["source"],
            "value": [RUN_SECRET, "chat"],
            "secret_id": ["run-secret"],
            "query": ["deploys", "metric units"],
            "reason": ["", "why"],
            "page_token": [""],
            "run_id": [""],
        },
        ints={
            "revision": [1, 2, 3],
            "expected_revision": [0, 2, 3],
            "since": [0, 1, 2],
            "through": [0, 3],
            "limit": [0, 1, 5],
            "page_size": [0, 2],
            "token_budget": [0, 5, 1000],
            "seconds": [now + 3600, now - 3600],
            "nanos": [0],
        },
    )


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (3600, -1),
        (3600, 1_000_000_000),
        (MAX_SECONDS + 1, 0),
        (MIN_SECONDS - 1, 0),
    ],
)
async def test_an_out_of_range_expires_at_is_invalid_argument(
    memory_channel: grpc.aio.Channel, seconds: int, nanos: int
) -> None:
    if seconds == 3600:
        seconds += int(time.time())
    later = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    error = await rpc_error(Memory(memory_channel, "fz/ttl").append(entry("x", expires_at=later)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    fields = [v.field for v in error.require(error_details_pb2.BadRequest).field_violations]
    assert fields == ["entries[0].expires_at"]


@pytest.mark.parametrize("method", MEMORY.methods)
@FUZZ
@given(data=st.data())
async def test_every_memory_rpc_answers_hostile_messages_with_documented_codes(
    served: Served,
    channel: grpc.aio.Channel,
    conn: asyncpg.Connection,
    hints: Hints,
    method: str,
    data: st.DataObject,
) -> None:
    target = served.target
    cls = target.request_class(method)
    request = data.draw(hostile_requests(cls, hints), label="request")
    await target.judge(method, await target.send(channel, conn, method, request), channel)


@pytest.mark.parametrize("method", MEMORY.methods)
@settings(FUZZ, max_examples=25)
@given(data=st.data())
async def test_every_memory_rpc_refuses_mangled_bytes_with_documented_codes(
    served: Served,
    channel: grpc.aio.Channel,
    conn: asyncpg.Connection,
    hints: Hints,
    method: str,
    data: st.DataObject,
) -> None:
    target = served.target
    cls = target.request_class(method)
    payload = data.draw(mangled_bytes(cls, hints), label="payload")
    await target.judge(method, await target.send(channel, conn, method, payload), channel)
