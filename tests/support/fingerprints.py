"""Did a call write anything? Per-table row counts and hashes read from the catalog."""

from __future__ import annotations

import asyncpg


async def fingerprint(conn: asyncpg.Connection, schema: str) -> dict[str, tuple[int, int]]:
    """Per table of `schema`: row count and a sum of row hashes, so that any insert, update or
    delete changes it (the tables are read from the catalog, so new migrations are covered)."""
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name",
        schema,
    )
    parts = [
        f"SELECT '{name}' AS name, count(*) AS n, coalesce(sum(hashtext(x::text)::bigint), 0)"
        f' AS h FROM "{schema}"."{name}" x'
        for name in (t["table_name"] for t in tables)
    ]
    rows = await conn.fetch(" UNION ALL ".join(parts))
    return {r["name"]: (r["n"], r["h"]) for r in rows}


def changed_tables(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    return sorted(name for name in after if before.get(name) != after[name])
