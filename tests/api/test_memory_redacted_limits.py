"""The size limits hold for text as stored: redaction markers may not grow a write past them."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2

from tests.support.errors import rpc_error
from tests.support.memory import Memory, entry

SECRET_ID = "S" * 64  # the longest id: each 8-char value becomes a 76-char marker
VALUE = "abcdefgh"
# Fits RATION_MEMORY_MAX_ENTRY_BYTES (65,536) as sent; ~553 KB once redacted.
GROWING = (VALUE + " ") * 7281


def violations(error: object) -> dict[str, str]:
    bad = error.detail(error_details_pb2.BadRequest)  # type: ignore[attr-defined]
    return {v.field: v.description for v in bad.field_violations}


async def test_an_entry_that_outgrows_the_entry_limit_once_redacted_is_refused(
    memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(memory_channel, "probe/redacted-growth")
    await memory.append("a first entry")
    before = await memory.capacity()
    error = await rpc_error(
        memory.append("small", GROWING, "small too", secrets={SECRET_ID: VALUE})
    )
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "VALIDATION_FAILED"
    found = violations(error)
    assert "after redaction" in found["entries[1].content"]
    assert "entries[0].content" not in found
    assert VALUE not in error.message
    assert all(VALUE not in d for d in found.values())
    assert await memory.capacity() == before  # nothing written


async def test_a_batch_that_outgrows_the_request_text_limit_once_redacted_is_refused(
    memory_channel: grpc.aio.Channel,
) -> None:
    # 17 entries that each fit after redaction (65,450 B) but total 1,112,650 B as stored, over
    # the 1 MiB request limit (the probe's batch committed, then its reply could not be sent).
    memory = Memory(memory_channel, "probe/redacted-batch")
    await memory.append("a first entry")
    before = await memory.capacity()
    each = (VALUE + " ") * 850
    error = await rpc_error(memory.append(*[each] * 17, secrets={SECRET_ID: VALUE}))
    assert error.reason == "VALIDATION_FAILED"
    found = violations(error)
    assert "after redaction" in found["entries"]
    assert not [f for f in found if f.endswith(".content")]
    assert await memory.capacity() == before


async def test_a_revised_entry_is_sized_as_stored(memory_channel: grpc.aio.Channel) -> None:
    memory = Memory(memory_channel, "probe/redacted-revise")
    written = await memory.append("to be revised")
    before = await memory.capacity()
    error = await rpc_error(
        memory.revise(written.entries[0].entry_id, entry(GROWING), secrets={SECRET_ID: VALUE})
    )
    assert error.reason == "VALIDATION_FAILED"
    assert "after redaction" in violations(error)["entry.content"]
    assert await memory.capacity() == before
