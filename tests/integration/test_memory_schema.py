"""The memory schema: the expected tables, tenant_id leading every key and index (DESIGN 6)."""

from __future__ import annotations

import asyncpg
from memory_support import MEMORY_TABLES

INDEX_LEADS = """
SELECT c.relname AS index_name, t.relname AS table_name, a.attname AS first_column
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
WHERE n.nspname = 'memory'
"""


async def test_migrations_create_the_memory_tables(db: asyncpg.Connection) -> None:
    tables = await db.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'memory'"
    )
    assert sorted(r["table_name"] for r in tables) == sorted(MEMORY_TABLES)


async def test_every_memory_table_and_index_leads_with_tenant_id(db: asyncpg.Connection) -> None:
    rows = await db.fetch(INDEX_LEADS)
    assert {r["table_name"] for r in rows} == set(MEMORY_TABLES)  # every table has a key
    assert [r["index_name"] for r in rows if r["first_column"] != "tenant_id"] == []


async def test_entry_ids_sort_as_bytes_in_the_store(db: asyncpg.Connection) -> None:
    collations = await db.fetch(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns"
        " WHERE table_schema = 'memory' AND column_name = 'entry_id'"
    )
    assert {r["collation_name"] for r in collations} == {"C"}
