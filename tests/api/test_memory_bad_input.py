"""Acceptance 7: bad input gets a clear INVALID_ARGUMENT or NOT_FOUND, and nothing is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2

from ration.memory.v1 import memory_pb2
from tests.support.errors import rpc_error
from tests.support.memory import Memory, entry, pb, request_id, row_counts
from tests.support.servers import StartServer

ENTRY_ID = "mem_ent_" + "a" * 32
PAST = timestamp_pb2.Timestamp(seconds=int((datetime.now(UTC) - timedelta(hours=1)).timestamp()))


def append(**fields: Any) -> pb.AppendEntriesRequest:
    values: dict[str, Any] = {
        "request_id": request_id(),
        "memory_ref": "bad/input",
        "entries": [entry("fine")],
    }
    values.update(fields)
    return pb.AppendEntriesRequest(**values)


BAD_APPENDS = {
    "empty content": (append(entries=[entry("")]), "entries[0].content"),
    "blank content": (append(entries=[entry(" \n\t")]), "entries[0].content"),
    # 33 characters, 66 bytes of UTF-8: the limit counts bytes.
    "oversized content": (append(entries=[entry("é" * 33)]), "entries[0].content"),
    "NUL in content": (append(entries=[entry("a\x00b")]), "entries[0].content"),
    "NUL in metadata": (
        append(entries=[entry("x", metadata={"k": "\x00"})]),
        "entries[0].metadata",
    ),
    "no entries": (append(entries=[]), "entries"),
    "too many entries": (append(entries=[entry(f"e{n}") for n in range(4)]), "entries"),
    "malformed entry id": (
        append(entries=[entry("x", entry_id="mem_ent_1")]),
        "entries[0].entry_id",
    ),
    "duplicate entry ids": (
        append(entries=[entry("x", entry_id=ENTRY_ID), entry("y", entry_id=ENTRY_ID)]),
        "entries[1].entry_id",
    ),
    "long kind": (append(entries=[entry("x", kind="k" * 65)]), "entries[0].kind"),
    "too many tags": (
        append(entries=[entry("x", tags=[f"t{n}" for n in range(33)])]),
        "entries[0].tags",
    ),
    "long tag": (append(entries=[entry("x", tags=["t" * 65])]), "entries[0].tags[0]"),
    "duplicate tag": (append(entries=[entry("x", tags=["a", "a"])]), "entries[0].tags[1]"),
    "too much metadata": (
        append(entries=[entry("x", metadata={f"k{n}": "v" for n in range(33)})]),
        "entries[0].metadata",
    ),
    "long metadata value": (
        append(entries=[entry("x", metadata={"k": "v" * 1025})]),
        "entries[0].metadata",
    ),
    "past expiry": (append(entries=[entry("x", expires_at=PAST)]), "entries[0].expires_at"),
    "short secret": (
        append(secrets=[memory_pb2.Secret(secret_id="s", value="short")]),
        "secrets[0].value",
    ),
    "bad secret id": (
        append(secrets=[memory_pb2.Secret(secret_id="no spaces", value="long enough value")]),
        "secrets[0].secret_id",
    ),
    "too many secrets": (
        append(
            secrets=[memory_pb2.Secret(secret_id=f"s{n}", value=f"value-{n:04}") for n in range(65)]
        ),
        "secrets",
    ),
    "long secret value": (
        append(secrets=[memory_pb2.Secret(secret_id="s", value="v" * 4097)]),
        "secrets[0].value",
    ),
    "request text over the limit": (
        append(entries=[entry("e" * 60, metadata={"k": "v" * 40}) for _ in range(3)]),
        "entries",
    ),
    "secret in the request id": (
        append(
            request_id="req-hunter2-horse",
            secrets=[memory_pb2.Secret(secret_id="s", value="hunter2-horse")],
        ),
        "request_id",
    ),
    "secret in the memory ref": (
        append(
            memory_ref="team/hunter2-horse",
            secrets=[memory_pb2.Secret(secret_id="s", value="hunter2-horse")],
        ),
        "memory_ref",
    ),
    "missing request id": (append(request_id=""), "request_id"),
    "empty memory ref": (append(memory_ref=""), "memory_ref"),
    "parent segment": (append(memory_ref="team/../other"), "memory_ref"),
    "control character": (append(memory_ref="a\x00b"), "memory_ref"),
    "long memory ref": (append(memory_ref="r" * 257), "memory_ref"),
    "negative expected revision": (append(expected_revision=-1), "expected_revision"),
}


@pytest.fixture
async def small_limits(start_server: StartServer) -> AsyncIterator[grpc.aio.Channel]:
    runner = await start_server(
        "memory",
        RATION_MEMORY_MAX_ENTRY_BYTES="64",
        RATION_MEMORY_MAX_BATCH_ENTRIES="3",
        RATION_MEMORY_MAX_REQUEST_TEXT_BYTES="256",
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel


async def test_each_bad_append_is_refused_with_its_field_and_writes_nothing(
    small_limits: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(small_limits, "bad/input")
    await memory.append("already here")
    rows = await row_counts(db)
    # One server for every case (a server per case costs more than the cases themselves).
    for case, (request_, field) in BAD_APPENDS.items():
        error = await rpc_error(memory.stub.AppendEntries(request_))
        assert (error.code, error.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "VALIDATION_FAILED",
        ), case
        violations = error.require(error_details_pb2.BadRequest).field_violations
        assert field in [v.field for v in violations], case
        for secret in request_.secrets:
            assert secret.value not in error.message, case
    assert await row_counts(db) == rows


async def test_an_entry_id_already_written_cannot_be_appended_again(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, "bad/again")
    await memory.append(entry("first", entry_id=ENTRY_ID))
    rows = await row_counts(db)
    error = await rpc_error(memory.append("other", entry("second", entry_id=ENTRY_ID)))
    assert error.reason == "VALIDATION_FAILED"
    violation = error.require(error_details_pb2.BadRequest).field_violations[0]
    assert (violation.field, violation.description) == ("entries[1].entry_id", "already exists")
    assert await row_counts(db) == rows


async def test_unknown_entry_ids_are_not_found_and_write_nothing(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, "bad/unknown")
    known = (await memory.append("known")).entries[0].entry_id
    rows = await row_counts(db)
    for call in (
        memory.forget(known, ENTRY_ID),
        memory.reactivate(ENTRY_ID),
        memory.revise(ENTRY_ID, "text"),
    ):
        error = await rpc_error(call)
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "ENTRY_NOT_FOUND")
        assert error.metadata == {"entryIds": ENTRY_ID}
    assert await row_counts(db) == rows
    # Writes other than append never create a memory.
    absent = Memory(memory_channel, "bad/absent")
    for absent_call in (absent.forget(ENTRY_ID), absent.dedupe(), absent.compact(dry_run=True)):
        assert (await rpc_error(absent_call)).reason == "MEMORY_NOT_FOUND"
    assert await row_counts(db) == rows


MaintenanceRequest = (
    pb.ForgetEntriesRequest
    | pb.ReactivateEntriesRequest
    | pb.OrganizeMemoryRequest
    | pb.CompactMemoryRequest
    | pb.ReviseEntryRequest
)
BAD_MAINTENANCE: list[tuple[MaintenanceRequest, str]] = [
    (pb.ForgetEntriesRequest(entry_ids=[]), "entry_ids"),
    (pb.ForgetEntriesRequest(entry_ids=["mem_ent_x"]), "entry_ids[0]"),
    (pb.ForgetEntriesRequest(entry_ids=[ENTRY_ID, ENTRY_ID]), "entry_ids[1]"),
    (pb.ForgetEntriesRequest(entry_ids=[ENTRY_ID], reason="r" * 257), "reason"),
    (pb.ReactivateEntriesRequest(entry_ids=[ENTRY_ID], reason="bell\a"), "reason"),
    (pb.OrganizeMemoryRequest(mode=memory_pb2.ORGANIZE_MODE_UNSPECIFIED), "mode"),
    (
        pb.OrganizeMemoryRequest(mode=cast(memory_pb2.OrganizeMode, 99)),
        "mode",
    ),  # an enum value this server does not know
    (pb.CompactMemoryRequest(dry_run=True, limit=-1), "limit"),
    (pb.ReviseEntryRequest(entry_id="nope", entry=entry("x")), "entry_id"),
    (pb.ReviseEntryRequest(entry_id=ENTRY_ID, entry=entry("")), "entry.content"),
]


async def test_bad_maintenance_requests_are_refused(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, "bad/maintenance")
    await memory.append("content")
    rows = await row_counts(db)
    methods: dict[type, Any] = {
        pb.ForgetEntriesRequest: memory.stub.ForgetEntries,
        pb.ReactivateEntriesRequest: memory.stub.ReactivateEntries,
        pb.OrganizeMemoryRequest: memory.stub.OrganizeMemory,
        pb.CompactMemoryRequest: memory.stub.CompactMemory,
        pb.ReviseEntryRequest: memory.stub.ReviseEntry,
    }
    for request_, field in BAD_MAINTENANCE:
        request_.request_id, request_.memory_ref = request_id(), memory.ref
        error = await rpc_error(methods[type(request_)](request_))
        assert error.reason == "VALIDATION_FAILED", request_
        violations = error.require(error_details_pb2.BadRequest).field_violations
        assert field in [v.field for v in violations], request_
    assert await row_counts(db) == rows


async def test_malformed_foreign_or_absent_refs_read_as_not_found_alike(
    memory_channel: grpc.aio.Channel,
) -> None:
    reference = await rpc_error(Memory(memory_channel, "no/such/memory").capacity())
    assert (reference.code, reference.reason) == (grpc.StatusCode.NOT_FOUND, "MEMORY_NOT_FOUND")
    for ref in ("", "../up", "a\x07b", "r" * 257, "never/written"):
        memory = Memory(memory_channel, ref)
        calls = (
            memory.capacity(),
            memory.revisions(0, 1),
            memory.changes(1),
            memory.version("mem_ver_" + "0" * 32),
            memory.cite(1, ENTRY_ID, "mem_ver_" + "0" * 32),
        )
        for call in calls:
            error = await rpc_error(call)
            assert (error.code, error.reason, error.message, error.metadata) == (
                reference.code,
                reference.reason,
                reference.message,
                reference.metadata,
            ), ref
