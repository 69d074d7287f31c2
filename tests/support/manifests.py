"""The reference manifest: DESIGN 4.2's canonical content built independently of the service,
and a revision's content rebuilt from the store with plain SQL."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

import asyncpg
import rfc8785


def canonical_document(items: Iterable[dict[str, str]], changes: Iterable[dict[str, Any]]) -> bytes:
    """DESIGN 4.2's canonical content, built independently of memory_service.domain.manifest and
    encoded by the rfc8785 package: the reference that reported manifest_bytes must match."""

    def nfc(value: str | None) -> str | None:
        return unicodedata.normalize("NFC", value) if value else None

    return rfc8785.dumps(
        {
            "changes": [
                {
                    "entry_id": c["entry_id"],
                    "from_entry_version_id": c["from_entry_version_id"],
                    "op": c["op"],
                    "reason": nfc(c["reason"]),
                    "to_entry_version_id": c["to_entry_version_id"],
                }
                for c in sorted(changes, key=lambda c: c["entry_id"].encode())
            ],
            "manifest": {
                "entries": [
                    {
                        "entry_content_hash": i["entry_content_hash"],
                        "entry_id": i["entry_id"],
                        "entry_version_id": i["entry_version_id"],
                        "state": i["state"],
                    }
                    for i in sorted(items, key=lambda i: i["entry_id"].encode())
                ],
                "format": "flat-v1",
            },
            "schema": "ration.memory.v1",
        }
    )


async def materialise(db: asyncpg.Connection, memory_ref: str, revision: int) -> bytes:
    """Revision's canonical content rebuilt from the store with plain SQL: the items whose
    ranges contain it, and its own changes."""
    items = await db.fetch(
        "SELECT i.entry_id, i.entry_version_id, i.entry_content_hash, i.state"
        " FROM memory.manifest_items i JOIN memory.memories m"
        " ON m.tenant_id = i.tenant_id AND m.memory_id = i.memory_id"
        " WHERE m.memory_ref = $1 AND i.from_rev <= $2 AND (i.to_rev IS NULL OR i.to_rev > $2)",
        memory_ref,
        revision,
    )
    changes = await db.fetch(
        "SELECT c.entry_id, c.op, c.from_entry_version_id, c.to_entry_version_id, c.reason"
        " FROM memory.changes c JOIN memory.memories m"
        " ON m.tenant_id = c.tenant_id AND m.memory_id = c.memory_id"
        " WHERE m.memory_ref = $1 AND c.revision = $2",
        memory_ref,
        revision,
    )
    return canonical_document([dict(r) for r in items], [dict(r) for r in changes])
