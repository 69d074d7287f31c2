"""SQL of ListMemory and SearchMemory: the head and clock, candidate rows, vectors, content."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

import asyncpg

from memory_service.domain.candidate_index import CandidateRow, Content
from memory_service.domain.token_counters import TokenCounter
from memory_service.store.writes import MemoryKey

# The head and the database clock in one row: expiry is judged by Postgres's now(), the same
# clock GetEntryVersion uses, never by this process's clock.
_HEAD_AND_NOW = """
SELECT memory_id, head_revision, now() AS now FROM memory.memories
WHERE tenant_id = $1 AND memory_ref = $2 AND head_revision > 0
"""

# The same for several memories, as one statement that enters the tenant itself (migration
# 0004): the fast path, shared by concurrent reads (usecases/read_snapshots.py).
_HEADS_AS_TENANT = """
SELECT memory_ref, memory_id, head_revision, now FROM memory.heads_as_tenant($1, $2::text[])
"""

# Every query below reads one table through a key prefix and leaves joins to Python. On a
# table that has not been analyzed yet (a fresh memory, right after a bulk load) the planner
# estimates ~1 row for (tenant_id, memory_id), and then turns joins and `= ANY(...)` lookups
# into nested scans of the whole memory, once per row or array element: seconds at 5,000
# entries. A single-table prefix scan cannot degrade that way.

# The items of revision $3's manifest (their ranges contain it). Run once per revision and
# process; the candidate index built from it is cached (usecases/candidate_cache.py).
_ACTIVE_ITEMS_AT = """
SELECT entry_id, entry_version_id FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND state = 'active'
  AND from_rev <= $3 AND (to_rev IS NULL OR to_rev > $3)
"""

# What ranking and filtering need of every version the memory wrote up to revision $3 (never
# the content); the caller keeps those the manifest names.
_VERSIONS_UPTO = """
SELECT entry_id, entry_version_id, kind, tags, created_at, expires_at,
       size_o200k, size_cl100k, size_chars
FROM memory.entry_versions
WHERE tenant_id = $1 AND memory_id = $2 AND created_in_revision <= $3
"""

# A few versions by id (those a donor index did not have): a prefix scan of the memory at
# worst, returning only these rows.
_EMBEDDINGS_OF = """
SELECT entry_version_id, embedding FROM memory.entry_versions
WHERE tenant_id = $1 AND memory_id = $2 AND entry_version_id = ANY($3::text[])
"""

_EMBEDDINGS_UPTO = """
SELECT entry_version_id, embedding FROM memory.entry_versions
WHERE tenant_id = $1 AND memory_id = $2 AND created_in_revision <= $3
"""

# Only fills a gap: a vector is a pure function of the content, so a concurrent filler wrote
# the same bytes. The vectors come joined from the arrays, never by subscript: Citus crashes
# deparsing an array subscript of a parameter in UPDATE ... SET.
_STORE_EMBEDDINGS = """
UPDATE memory.entry_versions v SET embedding = x.embedding
FROM unnest($3::text[], $4::bytea[]) AS x(entry_version_id, embedding)
WHERE v.tenant_id = $1 AND v.memory_id = $2 AND v.entry_version_id = ANY($3::text[])
  AND v.entry_version_id = x.entry_version_id AND v.embedding IS NULL
"""

# A few versions by id (the entries a call returns that no earlier call fetched).
_CONTENTS_OF = """
SELECT entry_version_id, content, metadata FROM memory.entry_versions
WHERE tenant_id = $1 AND memory_id = $2 AND entry_version_id = ANY($3::text[])
"""

# Full-text matches among revision $3's active items carrying every tag in $5: a bounded
# window ($6) by ts_rank, ties by entry_id bytes (0003 explains the 'simple' configuration).
# Membership is a correlated lookup by entry_id (OFFSET 0 keeps it one: never a join the
# planner could turn into a scan per match; its tenant and memory are the parameters, not the
# outer row's columns, so that Citus sees both tables pinned to the tenant's shard). Expiry is
# left to the caller, so the answer depends on the revision alone and can be cached with it.
_LEXICAL_AT = """
SELECT v.entry_id
FROM memory.entry_versions v
WHERE v.tenant_id = $1 AND v.memory_id = $2
  AND v.search_vector @@ websearch_to_tsquery('simple', $4)
  AND v.tags @> $5::text[]
  AND EXISTS (
      SELECT 1 FROM memory.manifest_items i
      WHERE i.tenant_id = $1 AND i.memory_id = $2 AND i.entry_id = v.entry_id
        AND i.entry_version_id = v.entry_version_id AND i.state = 'active'
        AND i.from_rev <= $3 AND (i.to_rev IS NULL OR i.to_rev > $3)
      OFFSET 0)
ORDER BY ts_rank(v.search_vector, websearch_to_tsquery('simple', $4)) DESC, v.entry_id
LIMIT $6
"""


async def head_and_now(
    conn: asyncpg.Connection, tenant: str, memory_ref: str
) -> tuple[MemoryKey, int, datetime] | None:
    """The memory's key, head revision and the database clock; None for no such memory."""
    row = await conn.fetchrow(_HEAD_AND_NOW, tenant, memory_ref)
    if row is None:
        return None
    return MemoryKey(tenant, row["memory_id"]), row["head_revision"], row["now"]


async def heads_as_tenant(
    conn: asyncpg.Connection, tenant: str, memory_refs: Sequence[str]
) -> dict[str, tuple[MemoryKey, int, datetime]]:
    """head_and_now of several memories outside any transaction: the statement enters the
    tenant on its own (migration 0004). Refs without a memory of this tenant are absent."""
    rows = await conn.fetch(_HEADS_AS_TENANT, tenant, list(memory_refs))
    return {
        row["memory_ref"]: (MemoryKey(tenant, row["memory_id"]), row["head_revision"], row["now"])
        for row in rows
    }


def _candidate(row: asyncpg.Record) -> CandidateRow:
    return CandidateRow(
        entry_id=row["entry_id"],
        entry_version_id=row["entry_version_id"],
        kind=row["kind"],
        tags=tuple(row["tags"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        sizes={
            TokenCounter.O200K_BASE: row["size_o200k"],
            TokenCounter.CL100K_BASE: row["size_cl100k"],
            TokenCounter.CHARS: row["size_chars"],
        },
    )


async def candidates_at(
    conn: asyncpg.Connection, key: MemoryKey, revision: int
) -> list[CandidateRow]:
    """The active items of `revision` with their versions' ranking data, in no order."""
    items = await conn.fetch(_ACTIVE_ITEMS_AT, key.tenant, key.memory_id, revision)
    wanted = {row["entry_version_id"] for row in items}
    versions = await conn.fetch(_VERSIONS_UPTO, key.tenant, key.memory_id, revision)
    return [_candidate(row) for row in versions if row["entry_version_id"] in wanted]


async def embeddings_upto(
    conn: asyncpg.Connection, key: MemoryKey, revision: int
) -> dict[str, bytes | None]:
    """The stored vector (None when missing) of every version written up to `revision`."""
    rows = await conn.fetch(_EMBEDDINGS_UPTO, key.tenant, key.memory_id, revision)
    return {row["entry_version_id"]: row["embedding"] for row in rows}


async def embeddings_of(
    conn: asyncpg.Connection, key: MemoryKey, version_ids: Sequence[str]
) -> dict[str, bytes | None]:
    rows = await conn.fetch(_EMBEDDINGS_OF, key.tenant, key.memory_id, list(version_ids))
    return {row["entry_version_id"]: row["embedding"] for row in rows}


async def store_embeddings(
    conn: asyncpg.Connection, key: MemoryKey, vectors: Mapping[str, bytes]
) -> None:
    ids = list(vectors)
    await conn.execute(_STORE_EMBEDDINGS, key.tenant, key.memory_id, ids, [vectors[i] for i in ids])


async def contents_of(
    conn: asyncpg.Connection, key: MemoryKey, version_ids: Sequence[str]
) -> dict[str, Content]:
    """Content and metadata of exactly these versions."""
    if not version_ids:
        return {}
    rows = await conn.fetch(_CONTENTS_OF, key.tenant, key.memory_id, list(version_ids))
    return {
        row["entry_version_id"]: Content(row["content"], json.loads(row["metadata"]))
        for row in rows
    }


async def lexical_at(
    conn: asyncpg.Connection,
    key: MemoryKey,
    revision: int,
    query: str,
    tags: Sequence[str],
    window: int,
) -> list[str]:
    """Entry ids of the best full-text matches, best first."""
    rows = await conn.fetch(
        _LEXICAL_AT, key.tenant, key.memory_id, revision, query, list(tags), window
    )
    return [row["entry_id"] for row in rows]
