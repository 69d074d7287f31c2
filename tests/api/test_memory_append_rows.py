"""Acceptance 2: a write touches the same rows whatever the memory's size (no manifest copies)."""

from __future__ import annotations

import asyncpg
import grpc
from memory_support import Memory, rows_written_by_revision

ONE_ENTRY_APPEND = {
    "memories": 1,  # the head advanced
    "revisions": 1,
    "changes": 1,
    "entry_versions": 1,
    "manifest_items": 1,  # one range opened; no other item is touched
    "request_log": 1,
}
ONE_ENTRY_FORGET = {**ONE_ENTRY_APPEND, "entry_versions": 0, "manifest_items": 2}


async def test_append_and_forget_write_the_same_rows_at_11_and_2001_entries(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, "rows/growing")
    await memory.append(*(f"seed entry {i}" for i in range(10)))

    eleventh = await memory.append("the 11th entry")
    at_11 = await rows_written_by_revision(db, memory.ref, eleventh.result.revision)
    forget_small = await memory.forget(eleventh.entries[0].entry_id)
    forget_at_11 = await rows_written_by_revision(db, memory.ref, forget_small.result.revision)

    for start in range(11, 2000, 100):  # batches of 100 up to 2,000 entries
        await memory.append(*(f"bulk entry {i}" for i in range(start, min(start + 100, 2000))))
    capacity = await memory.capacity()
    assert capacity.manifest_entry_count == 2000

    last = await memory.append("the 2,001st entry")
    at_2001 = await rows_written_by_revision(db, memory.ref, last.result.revision)
    forget_large = await memory.forget(last.entries[0].entry_id)
    forget_at_2001 = await rows_written_by_revision(db, memory.ref, forget_large.result.revision)

    assert at_11 == at_2001 == ONE_ENTRY_APPEND
    assert forget_at_11 == forget_at_2001 == ONE_ENTRY_FORGET
