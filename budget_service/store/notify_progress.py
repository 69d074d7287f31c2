"""Budget SQL of `ration notify`'s progress: per tenant and webhook, a position and a lease."""

from __future__ import annotations

import asyncpg

from budget_service.domain.tenant_events import Position
from budget_service.store import tenant_events

# Lease times are the database's clock, so replicas with skewed clocks agree on them.
_CLAIM_ROW = """
SELECT after_tx::text AS tx, after_run_id, after_seq, holder,
    holder = $3 OR lease_until < now() AS free
FROM budget.notify_progress WHERE tenant_id = $1 AND webhook_id = $2
FOR UPDATE"""

_TAKE = """
UPDATE budget.notify_progress
SET holder = $3, lease_until = now() + make_interval(secs => $4), updated_at = now()
WHERE tenant_id = $1 AND webhook_id = $2"""

_FIRST = """
INSERT INTO budget.notify_progress
    (tenant_id, webhook_id, after_tx, after_run_id, after_seq, holder, lease_until)
VALUES ($1, $2, $5::text::xid8, $6, $7, $3, now() + make_interval(secs => $4))
ON CONFLICT (tenant_id, webhook_id) DO NOTHING"""

# Progress and lease renewal in one: nothing changes unless the caller still holds the lease.
_SAVE = """
UPDATE budget.notify_progress
SET after_tx = $4::text::xid8, after_run_id = $5, after_seq = $6, delivered = delivered + $7,
    lease_until = now() + make_interval(secs => $8), updated_at = now()
WHERE tenant_id = $1 AND webhook_id = $2 AND holder = $3"""

_RELEASE = """
UPDATE budget.notify_progress SET holder = NULL, lease_until = now(), updated_at = now()
WHERE tenant_id = $1 AND webhook_id = $2 AND holder = $3"""


async def claim(
    conn: asyncpg.Connection,
    tenant: str,
    webhook_id: str,
    holder: str,
    lease_seconds: float,
    start: Position | None,
) -> Position | None:
    """The stored position when the lease is (now) the caller's; None while another process
    holds it. A webhook seen for the first time starts at `start`, or with None after every
    event of the transactions begun by now."""
    row = await conn.fetchrow(_CLAIM_ROW, tenant, webhook_id, holder)
    if row is None:
        if start is None:
            start = Position.before(await tenant_events.next_tx(conn, tenant))
        status = await conn.execute(
            _FIRST,
            tenant,
            webhook_id,
            holder,
            lease_seconds,
            str(start.tx),
            start.run_id,
            start.seq,
        )
        return start if status.endswith(" 1") else None  # else another process was first
    if not row["free"]:
        return None
    await conn.execute(_TAKE, tenant, webhook_id, holder, lease_seconds)
    return Position(int(row["tx"]), row["after_run_id"], row["after_seq"])


async def save(
    conn: asyncpg.Connection,
    tenant: str,
    webhook_id: str,
    holder: str,
    lease_seconds: float,
    position: Position,
    delivered: int,
) -> bool:
    """Moves the position (and renews the lease); False when the lease is no longer ours."""
    status = await conn.execute(
        _SAVE,
        tenant,
        webhook_id,
        holder,
        str(position.tx),
        position.run_id,
        position.seq,
        delivered,
        lease_seconds,
    )
    return bool(status == "UPDATE 1")


async def release(conn: asyncpg.Connection, tenant: str, webhook_id: str, holder: str) -> None:
    """Gives the lease up (at shutdown), so another process takes over at once."""
    await conn.execute(_RELEASE, tenant, webhook_id, holder)
