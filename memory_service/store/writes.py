"""SQL of the write path: the head lock, what a write reads at the head, and writing a revision."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from memory_service.domain.compaction import TombstoneStatus
from memory_service.domain.manifest import EntryState
from memory_service.domain.records import Head, HeadItem
from memory_service.domain.revisions import RevisionPlan
from memory_service.domain.token_counters import TokenCounter


@dataclass(frozen=True)
class MemoryKey:
    """A memory's storage key; the tenant is always part of it, so every query filters on it."""

    tenant: str
    memory_id: UUID


# The head row is locked first by every write (and nothing else is locked before it), so
# writes to one memory serialise on it and compare-and-swap sees the true head. The head's
# revision row is read by a second statement: under READ COMMITTED a locking read that waited
# for a concurrent writer re-checks only the locked row, so a join in the same statement could
# pair the new head with the old revision's counts.
_LOCK_HEAD = """
SELECT memory_id, head_revision FROM memory.memories
WHERE tenant_id = $1 AND memory_ref = $2
FOR UPDATE
"""
# On Citus, the tenant's shard held still until the transaction ends (memory.shard_fence_v1: a
# shard move waits for it, and it for a move in progress), before the head is read; a no-op on
# plain PostgreSQL.
_SHARD_FENCE = "SELECT memory.shard_fence_v1($1)"

# Previews take a shared lock: concurrent previews proceed, writes wait until they finish.
_LOCK_HEAD_SHARED = """
SELECT memory_id, head_revision FROM memory.memories
WHERE tenant_id = $1 AND memory_ref = $2
FOR SHARE
"""

_HEAD_USAGE = """
SELECT active_count, inactive_count, manifest_bytes FROM memory.revisions
WHERE tenant_id = $1 AND memory_id = $2 AND revision = $3
"""

# The inserting transaction holds the new row's lock; a concurrent creator waits, finds the
# conflict, and then locks the committed row instead.
_CREATE_MEMORY = """
INSERT INTO memory.memories (tenant_id, memory_ref) VALUES ($1, $2)
ON CONFLICT (tenant_id, memory_ref) DO NOTHING
RETURNING memory_id
"""

_HEAD_ITEM_COLUMNS = """
i.entry_id, i.entry_version_id, i.entry_content_hash, i.state, i.has_tags,
i.last_state_change_revision, v.version, v.created_in_revision
"""

# Lookups by a list of entry ids walk the list and look each id up by its full key (LATERAL
# ... LIMIT 1 keeps the planner from flattening them): on a memory Postgres has not analyzed
# yet (right after a bulk load) it estimates one row for (tenant_id, memory_id) and would
# otherwise apply `entry_id = ANY(...)` as a filter over a scan of the whole memory.
# Ids are compared in the columns' "C" collation, so the key indexes serve them.
_HEAD_ITEMS = f"""
SELECT {_HEAD_ITEM_COLUMNS}
FROM unnest($3::text[]) AS wanted (entry_id)
CROSS JOIN LATERAL (
    SELECT * FROM memory.manifest_items m
    WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.to_rev IS NULL
      AND m.entry_id = wanted.entry_id COLLATE "C"
    LIMIT 1
) i
CROSS JOIN LATERAL (
    SELECT version, created_in_revision FROM memory.entry_versions e
    WHERE e.tenant_id = $1 AND e.memory_id = $2 AND e.entry_version_id = i.entry_version_id
      AND e.entry_id = i.entry_id  -- redundant, so that either key index finds the row
    LIMIT 1
) v
"""

# Only the active items that share their content hash with another: dedupe reads no more.
# Every table names the tenant itself (not through the join), or Citus reads every shard.
_DUPLICATE_ACTIVE_ITEMS = f"""
SELECT {_HEAD_ITEM_COLUMNS}
FROM (
    SELECT *, count(*) OVER (PARTITION BY entry_content_hash) AS copies
    FROM memory.manifest_items
    WHERE tenant_id = $1 AND memory_id = $2 AND to_rev IS NULL AND state = 'active'
) i
JOIN memory.entry_versions v
  ON v.tenant_id = $1 AND v.memory_id = $2 AND v.entry_version_id = i.entry_version_id
WHERE i.copies > 1
"""

_HEAD_TOMBSTONES = """
SELECT entry_id, entry_version_id, has_tags, last_state_change_revision
FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND to_rev IS NULL AND state = 'inactive'
"""

# Ids ever written in this memory, including compacted ones: an id is never reused.
_WRITTEN_ENTRY_IDS = """
SELECT wanted.entry_id FROM unnest($3::text[]) AS wanted (entry_id)
WHERE EXISTS (
    SELECT FROM (
        SELECT 1 FROM memory.entry_versions e
        WHERE e.tenant_id = $1 AND e.memory_id = $2 AND e.entry_id = wanted.entry_id COLLATE "C"
        LIMIT 1
    ) AS written
)
"""

_INSERT_REVISION = """
INSERT INTO memory.revisions
    (tenant_id, memory_id, revision, operation, change_count, active_count, inactive_count,
     manifest_bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING created_at
"""

# The batch inserts select their rows from the memory's own row joined with the arrays, not
# from the arrays alone: Citus then pushes the whole INSERT ... SELECT down to the tenant's
# shard as one statement (an INSERT ... SELECT of constants only is evaluated on the coordinator
# and sent as COPY, which row-level security refuses). On PostgreSQL it is one key lookup more.
_INSERT_CHANGES = """
INSERT INTO memory.changes
    (tenant_id, memory_id, revision, entry_id, op, from_entry_version_id, to_entry_version_id,
     reason)
SELECT m.tenant_id, m.memory_id, $3, c.entry_id, c.op, c.from_id, c.to_id, c.reason
FROM memory.memories m
CROSS JOIN unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
     AS c (entry_id, op, from_id, to_id, reason)
WHERE m.tenant_id = $1 AND m.memory_id = $2
"""

_INSERT_VERSION = """
INSERT INTO memory.entry_versions
    (tenant_id, memory_id, entry_version_id, entry_id, version, previous_version_id, kind,
     content, tags, metadata, content_hash, created_in_revision, created_at, expires_at,
     size_o200k, size_cl100k, size_chars, embedding)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14, $15, $16, $17, $18)
"""

# One key lookup and update per entry id, in a server-side loop (migration 0006): a single
# UPDATE joined with the ids lets the planner scan the whole memory on an unanalyzed table, and
# the former physical-address (ctid) form is refused by Citus. Returns the rows it closed.
_CLOSE_ITEMS = """
SELECT memory.close_head_items($1, $2, $3, $4::text[])
"""

_OPEN_ITEMS = """
INSERT INTO memory.manifest_items
    (tenant_id, memory_id, entry_id, entry_version_id, entry_content_hash, state, has_tags,
     last_state_change_revision, from_rev)
SELECT m.tenant_id, m.memory_id, i.entry_id, i.version_id, i.hash, i.state, i.has_tags,
       i.changed, $3
FROM memory.memories m
CROSS JOIN unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::boolean[], $9::bigint[])
     AS i (entry_id, version_id, hash, state, has_tags, changed)
WHERE m.tenant_id = $1 AND m.memory_id = $2
"""

_ADVANCE_HEAD = """
UPDATE memory.memories SET head_revision = $3
WHERE tenant_id = $1 AND memory_id = $2 AND head_revision = $4
"""


def _head_item(row: asyncpg.Record) -> HeadItem:
    return HeadItem(
        entry_id=row["entry_id"],
        entry_version_id=row["entry_version_id"],
        entry_content_hash=row["entry_content_hash"],
        state=EntryState(row["state"]),
        has_tags=row["has_tags"],
        last_state_change_revision=row["last_state_change_revision"],
        version=row["version"],
        created_in_revision=row["created_in_revision"],
    )


async def lock_head(
    conn: asyncpg.Connection, tenant: str, memory_ref: str, *, shared: bool = False
) -> Head | None:
    """The memory's head under a row lock (exclusive for writes, shared for previews)."""
    await conn.execute(_SHARD_FENCE, tenant)
    row = await conn.fetchrow(_LOCK_HEAD_SHARED if shared else _LOCK_HEAD, tenant, memory_ref)
    if row is None:
        return None
    memory_id, revision = row["memory_id"], row["head_revision"]
    if revision == 0:  # created by a first write that is still in this transaction
        return Head(memory_id, 0, 0, 0, 0)
    usage = await conn.fetchrow(_HEAD_USAGE, tenant, memory_id, revision)
    return Head(
        memory_id=memory_id,
        revision=revision,
        active_count=usage["active_count"],
        inactive_count=usage["inactive_count"],
        manifest_bytes=usage["manifest_bytes"],
    )


async def lock_or_create_head(conn: asyncpg.Connection, tenant: str, memory_ref: str) -> Head:
    """The locked head, creating the memory (revision 0, rolled back with a refused write)."""
    head = await lock_head(conn, tenant, memory_ref)
    if head is not None:
        return head
    memory_id = await conn.fetchval(_CREATE_MEMORY, tenant, memory_ref)
    if memory_id is not None:
        return Head(memory_id, 0, 0, 0, 0)
    head = await lock_head(conn, tenant, memory_ref)
    if head is None:  # a concurrent creator rolled back after we saw its row; retry cleanly
        raise asyncpg.exceptions.SerializationError("memory creation raced")
    return head


async def head_items(
    conn: asyncpg.Connection, key: MemoryKey, entry_ids: Sequence[str]
) -> dict[str, HeadItem]:
    rows = await conn.fetch(_HEAD_ITEMS, key.tenant, key.memory_id, list(entry_ids))
    return {row["entry_id"]: _head_item(row) for row in rows}


async def duplicate_active_items(conn: asyncpg.Connection, key: MemoryKey) -> list[HeadItem]:
    rows = await conn.fetch(_DUPLICATE_ACTIVE_ITEMS, key.tenant, key.memory_id)
    return [_head_item(row) for row in rows]


async def head_tombstones(conn: asyncpg.Connection, key: MemoryKey) -> list[TombstoneStatus]:
    rows = await conn.fetch(_HEAD_TOMBSTONES, key.tenant, key.memory_id)
    return [
        TombstoneStatus(
            entry_id=row["entry_id"],
            entry_version_id=row["entry_version_id"],
            state=EntryState.INACTIVE,
            has_tags=row["has_tags"],
            last_state_change_revision=row["last_state_change_revision"],
        )
        for row in rows
    ]


async def written_entry_ids(
    conn: asyncpg.Connection, key: MemoryKey, entry_ids: Sequence[str]
) -> set[str]:
    rows = await conn.fetch(_WRITTEN_ENTRY_IDS, key.tenant, key.memory_id, list(entry_ids))
    return {row["entry_id"] for row in rows}


async def write_revision(conn: asyncpg.Connection, tenant: str, plan: RevisionPlan) -> datetime:
    """Writes the planned revision: O(1) rows per change, whatever the memory's size.

    Returns the revision's created_at, which its entry versions share.
    """
    base = plan.base
    if base.memory_id is None:
        raise ValueError("the memory row must exist (locked) before a revision is written")
    key = (tenant, base.memory_id)
    revision = plan.revision
    created_at: datetime = await conn.fetchval(
        _INSERT_REVISION,
        *key,
        revision,
        plan.operation.value,
        len(plan.changes),
        plan.active_count,
        plan.inactive_count,
        plan.manifest_bytes,
    )
    changes = plan.changes
    await conn.execute(
        _INSERT_CHANGES,
        *key,
        revision,
        [c.entry_id for c in changes],
        [c.op.value for c in changes],
        [c.from_entry_version_id for c in changes],
        [c.to_entry_version_id for c in changes],
        [c.reason or None for c in changes],
    )
    if plan.versions:
        await conn.executemany(
            _INSERT_VERSION,
            [
                (
                    *key,
                    v.entry.entry_version_id,
                    v.entry.entry_id,
                    v.version,
                    v.previous_version_id,
                    v.entry.kind,
                    v.entry.content,
                    list(v.entry.tags),
                    json.dumps(dict(v.entry.metadata), sort_keys=True),
                    v.entry.content_hash,
                    revision,
                    created_at,
                    v.entry.expires_at,
                    v.entry.sizes[TokenCounter.O200K_BASE],
                    v.entry.sizes[TokenCounter.CL100K_BASE],
                    v.entry.sizes[TokenCounter.CHARS],
                    v.entry.embedding,
                )
                for v in plan.versions
            ],
        )
    if plan.closed:
        closed = await conn.fetchval(_CLOSE_ITEMS, *key, revision, list(plan.closed))
        if closed != len(plan.closed):
            raise AssertionError("a planned item was not open at the head")
    if plan.opened:
        opened = plan.opened
        await conn.execute(
            _OPEN_ITEMS,
            *key,
            revision,
            [i.entry_id for i in opened],
            [i.entry_version_id for i in opened],
            [i.entry_content_hash for i in opened],
            [i.state.value for i in opened],
            [i.has_tags for i in opened],
            [i.last_state_change_revision for i in opened],
        )
    status = await conn.execute(_ADVANCE_HEAD, *key, revision, base.revision)
    if status != "UPDATE 1":
        raise AssertionError("the head moved under its row lock")
    return created_at
