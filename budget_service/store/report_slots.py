"""Budget SQL of report slots: a tenant's report statements at once, bounded across replicas.

A report statement first takes one of its tenant's N slots: a transaction-level advisory lock
(pg_try_advisory_xact_lock(int, int)) in the report's own read transaction, held until that
transaction ends, so it is released on COMMIT, ROLLBACK or a dropped connection and works
through PgBouncer in transaction mode (no session state). Every replica locks on the same
database, so N bounds the tenant's report statements on it, whatever the replicas and processes.

The first key is SLOT_CLASS plus the slot (0 … N-1), a class no other lock of ration takes;
the second is the first 4 bytes of the tenant's SHA-256 (stable across processes and Postgres
versions). Two tenants whose digests share those bytes share slots: a rare false
TOO_MANY_REPORTS while the other's report runs, never a wrong answer. On Citus the lock is
taken on the node the service connects to (the coordinator).
"""

from __future__ import annotations

import hashlib

import asyncpg

SLOT_CLASS = 0x5250_5400  # "RPT\0": slot s is SLOT_CLASS + s
MAX_SLOTS = 64

# The first free slot, tried in order (the filter runs once per slot until one is taken).
_TAKE = """
SELECT s.slot FROM generate_series(0, $2::integer - 1) s (slot)
WHERE pg_try_advisory_xact_lock($3::integer + s.slot, $1::integer)
LIMIT 1"""


def tenant_key(tenant: str) -> int:
    """The tenant's second lock key: its SHA-256's first 4 bytes, as a signed int4."""
    return int.from_bytes(hashlib.sha256(tenant.encode()).digest()[:4], "big", signed=True)


async def take(conn: asyncpg.Connection, tenant: str, slots: int) -> bool:
    """Takes a free one of the tenant's `slots` slots for the rest of the current transaction;
    False when every one is held (by this or any other session)."""
    if not 1 <= slots <= MAX_SLOTS:
        raise ValueError(f"slots must be 1 to {MAX_SLOTS}, not {slots}")
    return await conn.fetchval(_TAKE, tenant_key(tenant), slots, SLOT_CLASS) is not None
