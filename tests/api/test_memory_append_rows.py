"""Acceptance 2: a write touches the same rows whatever the memory's size (no manifest copies),
and its lookups by entry id read a handful of pages in a memory of 100k entries, with or
without statistics (issue 23)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import asyncpg
import grpc

from memory_service.store import writes as store
from servicekit.db import TENANT_SETTING
from tests.support.memory import Memory, rows_written_by_revision

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


async def _buffers(db: asyncpg.Connection, as_app: tuple[str, str], sql: str, *args: object) -> int:
    """Shared buffers one run of `sql` touches (EXPLAIN ANALYZE, rolled back), as the
    application role inside the tenant (`as_app`: role, tenant), row-level security on."""
    role, tenant = as_app
    transaction = db.transaction()
    await transaction.start()
    try:
        await db.execute(f'SET LOCAL ROLE "{role}"')
        await db.execute("SELECT set_config($1, $2, true)", TENANT_SETTING, tenant)
        plan = await db.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    finally:
        await transaction.rollback()
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


# The API writes 1,001 entries; copies of their rows (in SQL, as the superuser) make the memory
# 100,100 entries: every column as written, the ids suffixed.
COPIES = 99
_SUFFIXED = {"entry_id", "entry_version_id", "previous_version_id"}
_COLUMNS = """
SELECT column_name FROM information_schema.columns
WHERE table_schema = 'memory' AND table_name = $1 AND is_generated = 'NEVER'
ORDER BY ordinal_position"""


async def _copy_rows(db: asyncpg.Connection, table: str, tenant: str, memory_id: object) -> None:
    columns = [r["column_name"] for r in await db.fetch(_COLUMNS, table)]
    values = [f"t.{c} || '-' || g" if c in _SUFFIXED else f"t.{c}" for c in columns]
    await db.execute(
        f"INSERT INTO memory.{table} ({', '.join(columns)})"
        f" SELECT {', '.join(values)} FROM memory.{table} t"
        " CROSS JOIN generate_series(1, $3::integer) g"
        " WHERE t.tenant_id = $1 AND t.memory_id = $2",
        tenant,
        memory_id,
        COPIES,
    )


async def test_lookups_by_entry_id_stay_key_lookups_on_a_memory_of_100k_entries(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection, app_database_url: str
) -> None:
    """Right after a bulk load Postgres has no statistics for the memory and estimates one row
    per (tenant, memory); the write path's lookups by entry id must still read a handful of
    pages, not the whole memory (they once read every version: milliseconds per write), and
    the same once the tables are analyzed."""
    memory = Memory(memory_channel, "rows/unanalyzed")
    for start in range(0, 1000, 100):
        await memory.append(*(f"loaded entry {i}" for i in range(start, start + 100)))
    last = await memory.append("the one to look up")
    tenant, memory_id = await db.fetchrow(
        "SELECT tenant_id, memory_id FROM memory.memories WHERE memory_ref = $1", memory.ref
    )
    for table in ("entry_versions", "manifest_items"):
        await _copy_rows(db, table, tenant, memory_id)
    entries = await db.fetchval(
        "SELECT count(*) FROM memory.manifest_items"
        " WHERE tenant_id = $1 AND memory_id = $2 AND to_rev IS NULL",
        tenant,
        memory_id,
    )
    assert entries == 1001 * (COPIES + 1)
    as_app = (str(urlsplit(app_database_url).username), tenant)
    ids = [last.entries[0].entry_id, "mem_ent_" + "0" * 32]
    key = (tenant, memory_id)
    revision = last.result.revision + 1

    async def pages() -> dict[str, int]:
        return {
            "written": await _buffers(db, as_app, store._WRITTEN_ENTRY_IDS, *key, ids),
            "head": await _buffers(db, as_app, store._HEAD_ITEMS, *key, ids),
            "close": await _buffers(db, as_app, store._CLOSE_ITEMS, *key, revision, ids[:1]),
        }

    await db.execute(  # forget what autovacuum may have learnt: the state right after the load
        "DELETE FROM pg_statistic WHERE starelid IN"
        " ('memory.entry_versions'::regclass, 'memory.manifest_items'::regclass)"
    )
    unanalyzed = await pages()
    await db.execute("ANALYZE memory.entry_versions, memory.manifest_items")
    analyzed = await pages()
    # A full scan of this memory reads thousands of pages; a key probe a handful.
    assert max(unanalyzed.values()) < 60, unanalyzed
    assert max(analyzed.values()) < 60, analyzed
