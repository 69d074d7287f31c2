"""SQL of the read path: heads, revision rows, changes, entry versions and past manifests."""

from __future__ import annotations

import json
from datetime import datetime

import asyncpg

from memory_service.domain.manifest import Change, ChangeOp, EntryState, ManifestItem
from memory_service.domain.records import RecordedChange, RevisionInfo, StoredVersion
from memory_service.domain.token_counters import TokenCounter
from memory_service.store.writes import MemoryKey

_FIND_HEAD = """
SELECT memory_id, head_revision FROM memory.memories
WHERE tenant_id = $1 AND memory_ref = $2 AND head_revision > 0
"""

_REVISION_COLUMNS = """
revision, created_at, operation, change_count, active_count, inactive_count, manifest_bytes
"""

_REVISION = f"""
SELECT {_REVISION_COLUMNS} FROM memory.revisions
WHERE tenant_id = $1 AND memory_id = $2 AND revision = $3
"""

_REVISIONS_BETWEEN = f"""
SELECT {_REVISION_COLUMNS} FROM memory.revisions
WHERE tenant_id = $1 AND memory_id = $2 AND revision > $3 AND revision <= $4
ORDER BY revision
"""

# Keyset pagination on (revision, entry_id), the primary key order.
_CHANGES_AFTER = """
SELECT revision, entry_id, op, from_entry_version_id, to_entry_version_id, reason
FROM memory.changes
WHERE tenant_id = $1 AND memory_id = $2 AND revision > $3 AND revision <= $4
  AND (revision, entry_id) > ($5, $6)
ORDER BY revision, entry_id
LIMIT $7
"""

_CHANGES_OF = """
SELECT revision, entry_id, op, from_entry_version_id, to_entry_version_id, reason
FROM memory.changes
WHERE tenant_id = $1 AND memory_id = $2 AND revision = $3
"""

_ENTRY_VERSION = """
SELECT entry_id, entry_version_id, version, previous_version_id, kind, content, tags, metadata,
       content_hash, created_in_revision, created_at, expires_at,
       size_o200k, size_cl100k, size_chars
FROM memory.entry_versions
WHERE tenant_id = $1 AND memory_id = $2 AND entry_version_id = $3
  AND (expires_at IS NULL OR expires_at > now())
"""

# An item is in revision R's manifest when its range [from_rev, to_rev) contains R.
_ITEM_AT = """
SELECT state FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND entry_id = $3 AND entry_version_id = $4
  AND from_rev <= $5 AND (to_rev IS NULL OR to_rev > $5)
"""

_MANIFEST_AT = """
SELECT entry_id, entry_version_id, entry_content_hash, state FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND from_rev <= $3 AND (to_rev IS NULL OR to_rev > $3)
ORDER BY entry_id
"""

# The head form matches the partial index of head tombstones; a past revision scans its ranges.
_COMPACTABLE_AT_HEAD = """
SELECT count(*) FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND to_rev IS NULL AND state = 'inactive'
  AND NOT has_tags AND ($3::bigint IS NULL OR last_state_change_revision <= $3)
"""

_COMPACTABLE_AT = """
SELECT count(*) FROM memory.manifest_items
WHERE tenant_id = $1 AND memory_id = $2 AND from_rev <= $3 AND (to_rev IS NULL OR to_rev > $3)
  AND state = 'inactive' AND NOT has_tags
  AND ($4::bigint IS NULL OR last_state_change_revision <= $4)
"""


def _revision(row: asyncpg.Record) -> RevisionInfo:
    return RevisionInfo(
        revision=row["revision"],
        created_at=row["created_at"],
        operation=row["operation"],
        change_count=row["change_count"],
        active_count=row["active_count"],
        inactive_count=row["inactive_count"],
        manifest_bytes=row["manifest_bytes"],
    )


def _change(row: asyncpg.Record) -> RecordedChange:
    change = Change(
        op=ChangeOp(row["op"]),
        entry_id=row["entry_id"],
        from_entry_version_id=row["from_entry_version_id"],
        to_entry_version_id=row["to_entry_version_id"],
        reason=row["reason"],
    )
    return RecordedChange(row["revision"], change)


async def find_head(
    conn: asyncpg.Connection, tenant: str, memory_ref: str
) -> tuple[MemoryKey, int] | None:
    """The memory's key and head revision; None when this tenant has no such memory."""
    row = await conn.fetchrow(_FIND_HEAD, tenant, memory_ref)
    if row is None:
        return None
    return MemoryKey(tenant, row["memory_id"]), row["head_revision"]


async def revision_info(
    conn: asyncpg.Connection, key: MemoryKey, revision: int
) -> RevisionInfo | None:
    row = await conn.fetchrow(_REVISION, key.tenant, key.memory_id, revision)
    return None if row is None else _revision(row)


async def revisions_between(
    conn: asyncpg.Connection, key: MemoryKey, since: int, through: int
) -> list[RevisionInfo]:
    rows = await conn.fetch(_REVISIONS_BETWEEN, key.tenant, key.memory_id, since, through)
    return [_revision(row) for row in rows]


async def changes_after(
    conn: asyncpg.Connection,
    key: MemoryKey,
    since: int,
    through: int,
    after: tuple[int, str],
    limit: int,
) -> list[RecordedChange]:
    """Changes of revisions in (since, through] that sort after `after` = (revision, entry_id)."""
    rows = await conn.fetch(
        _CHANGES_AFTER, key.tenant, key.memory_id, since, through, after[0], after[1], limit
    )
    return [_change(row) for row in rows]


async def changes_of(conn: asyncpg.Connection, key: MemoryKey, revision: int) -> list[Change]:
    rows = await conn.fetch(_CHANGES_OF, key.tenant, key.memory_id, revision)
    return [_change(row).change for row in rows]


async def entry_version(
    conn: asyncpg.Connection, key: MemoryKey, entry_version_id: str
) -> StoredVersion | None:
    """The version unless it has expired (by the database clock)."""
    row = await conn.fetchrow(_ENTRY_VERSION, key.tenant, key.memory_id, entry_version_id)
    if row is None:
        return None
    expires_at: datetime | None = row["expires_at"]
    return StoredVersion(
        entry_id=row["entry_id"],
        entry_version_id=row["entry_version_id"],
        version=row["version"],
        previous_version_id=row["previous_version_id"],
        kind=row["kind"],
        content=row["content"],
        tags=tuple(row["tags"]),
        metadata=json.loads(row["metadata"]),
        content_hash=row["content_hash"],
        created_in_revision=row["created_in_revision"],
        created_at=row["created_at"],
        expires_at=expires_at,
        sizes={
            TokenCounter.O200K_BASE: row["size_o200k"],
            TokenCounter.CL100K_BASE: row["size_cl100k"],
            TokenCounter.CHARS: row["size_chars"],
        },
    )


async def item_state_at(
    conn: asyncpg.Connection, key: MemoryKey, revision: int, entry_id: str, entry_version_id: str
) -> EntryState | None:
    """The state of (entry_id, entry_version_id) in revision's manifest; None if absent."""
    state = await conn.fetchval(
        _ITEM_AT, key.tenant, key.memory_id, entry_id, entry_version_id, revision
    )
    return None if state is None else EntryState(state)


async def manifest_at(
    conn: asyncpg.Connection, key: MemoryKey, revision: int
) -> list[ManifestItem]:
    """Revision's manifest, reconstructed from the item ranges (entry_id byte order)."""
    rows = await conn.fetch(_MANIFEST_AT, key.tenant, key.memory_id, revision)
    return [
        ManifestItem(
            row["entry_id"],
            row["entry_version_id"],
            row["entry_content_hash"],
            EntryState(row["state"]),
        )
        for row in rows
    ]


async def compactable_count(
    conn: asyncpg.Connection,
    key: MemoryKey,
    revision: int,
    cutoff: int | None,
    *,
    locked_head: bool = False,
) -> int:
    """Untagged tombstones of `revision` last changed at or before `cutoff` (None: any age).

    `locked_head` says `revision` is the head and its row lock is held, so the open ranges are
    exactly its manifest; without the lock a concurrent write could move the head meanwhile.
    """
    if locked_head:
        count = await conn.fetchval(_COMPACTABLE_AT_HEAD, key.tenant, key.memory_id, cutoff)
    else:
        count = await conn.fetchval(_COMPACTABLE_AT, key.tenant, key.memory_id, revision, cutoff)
    return int(count)
