"""Budget SQL of the tenant event stream: a tenant's events in (tx, run_id, seq) order.

Postgres transaction ids are handed out when a transaction first writes, not when it commits,
so a reader that took every committed event up to the newest tx could miss one that an older
transaction commits a moment later. Migration 0008 stamps each event with the id of the
transaction that wrote it (budget.events.tx, stamped by a trigger: no writer changes), and
a read returns only events whose tx is below a horizon that every transaction of this database
with a smaller id has passed (budget.tenant_horizon_v1, taken just before the scan): the
events below it are final, and nothing can later appear before a position already read.
Transactions of other databases on the server do not hold it. A reader that scanned
everything up to the horizon may move its position to (horizon, '', 0) even when no row
matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from budget_service.domain.records import PoolKey, RunRecord
from budget_service.domain.tenant_events import Position, TenantEventFilter
from budget_service.store import rows
from budget_service.store.reads import StoredEvent

# A pool window's place in the order: a key no run_id can be (run ids never hold "~"), so a
# pool's events sort among the runs' by (tx, key, seq) and a cursor may point at one.
_POOL_KEY = "('~' || p.scope || '/' || p.scope_id || '/' || budget.epoch_us(p.window_start)::text)"

# $2..$4: the position read up to; $5 the most rows to scan; $6..$8 the filter (NULL: any);
# $9 the horizon, taken in an earlier snapshot than this one. The scan is bounded in rows
# whatever the filter matches (the `events_by_tx` index walks the order); of the scanned rows
# only the matching ones and the last (where the reader got to) come back.
_SCAN = f"""
WITH scanned AS (
    SELECT u.* FROM (
    (SELECT e.tx, e.run_id, e.seq, e.type, e.payload_json, e.created_at,
        NULL::text AS pool_scope, NULL::text AS pool_scope_id,
        NULL::timestamptz AS pool_window,
        ($6::text[] IS NULL OR e.type = ANY($6::text[]))
        AND ($7::text[] IS NULL OR e.run_id = ANY($7::text[]))
        AND ($8::text[] IS NULL OR EXISTS (
            SELECT 1 FROM budget.runs r
            WHERE r.tenant_id = $1 AND r.run_id = e.run_id AND r.project_id = ANY($8::text[])
        )) AS matches
    FROM budget.events e
    WHERE e.tenant_id = $1
      AND (e.tx, e.run_id COLLATE "C", e.seq) > ($2::text::xid8, $3::text, $4::bigint)
      AND e.tx < $9::text::xid8
    ORDER BY e.tx, e.run_id COLLATE "C", e.seq
    LIMIT $5)
    UNION ALL
    (SELECT p.tx, {_POOL_KEY} AS run_id, p.seq, p.type, p.payload_json, p.created_at,
        p.scope, p.scope_id, p.window_start,
        ($6::text[] IS NULL OR p.type = ANY($6::text[]))
        AND $7::text[] IS NULL
        AND ($8::text[] IS NULL OR (p.scope = 'project' AND p.scope_id = ANY($8::text[])))
            AS matches
    FROM budget.pool_events p
    WHERE p.tenant_id = $1
      AND (p.tx, {_POOL_KEY} COLLATE "C", p.seq) > ($2::text::xid8, $3::text, $4::bigint)
      AND p.tx < $9::text::xid8
    ORDER BY p.tx, {_POOL_KEY} COLLATE "C", p.seq
    LIMIT $5)
    ) u
    ORDER BY u.tx, u.run_id COLLATE "C", u.seq
    LIMIT $5
), numbered AS (
    SELECT s.*, row_number() OVER (
            ORDER BY s.tx DESC, s.run_id COLLATE "C" DESC, s.seq DESC) = 1 AS last,
        count(*) OVER () AS scanned
    FROM scanned s
)
SELECT $9::text AS horizon, n.tx::text AS tx, n.run_id,
    n.seq, n.type, CASE WHEN n.matches THEN n.payload_json END AS payload_json, n.created_at,
    n.matches, n.scanned, n.pool_scope, n.pool_scope_id, n.pool_window
FROM (SELECT 1) one
LEFT JOIN numbered n ON n.matches OR n.last
ORDER BY n.tx, n.run_id COLLATE "C", n.seq"""

_RUNS = "SELECT * FROM budget.runs WHERE tenant_id = $1 AND run_id = ANY($2::text[])"


# A function of the tenant (migration 0011), so that on Citus it runs where the tenant's
# events are stamped: the snapshot of the node that holds the tenant's shard.
_NEXT_TX = "SELECT budget.tenant_next_tx_v1($1)"
_HORIZON = "SELECT budget.tenant_horizon_v1($1)"


@dataclass(frozen=True)
class ScannedEvent:
    position: Position
    event: StoredEvent
    pool: PoolKey | None = None  # a pool window's own event (no run)

    @property
    def run_id(self) -> str:
        return self.position.run_id

    @property
    def seq(self) -> int:
        return self.position.seq


@dataclass(frozen=True)
class Scan:
    """The matching events after a position, and where the reader got to: past the last row
    it scanned, or to the horizon when it scanned everything below it. `skipped_tail`: the
    last row scanned did not match; `full`: the scan stopped at its row bound."""

    events: list[ScannedEvent]
    reached: Position
    skipped_tail: bool
    full: bool


def _array(values: Sequence[str]) -> list[str] | None:
    return list(values) if values else None


async def scan(
    conn: asyncpg.Connection,
    tenant: str,
    after: Position,
    wanted: TenantEventFilter,
    limit: int,
) -> Scan:
    """At most `limit` events after `after` are looked at (matching or not)."""
    horizon = await conn.fetchval(_HORIZON, tenant)  # first: its snapshot precedes the scan's
    found = await conn.fetch(
        _SCAN,
        tenant,
        str(after.tx),
        after.run_id,
        after.seq,
        limit,
        _array(wanted.event_types),
        _array(wanted.run_ids),
        _array(wanted.project_ids),
        horizon,
    )
    events, reached, skipped_tail = [], after, False
    for row in found:
        if row["tx"] is None:  # nothing was scanned
            continue
        position = Position(int(row["tx"]), row["run_id"], row["seq"])
        reached = max(reached, position)
        skipped_tail = not row["matches"]
        if row["matches"]:
            stored = StoredEvent(row["seq"], row["type"], row["payload_json"], row["created_at"])
            pool = None
            if row["pool_scope"] is not None:
                pool = rows.pool_key_of(row["pool_scope"], row["pool_scope_id"], row["pool_window"])
            events.append(ScannedEvent(position, stored, pool))
    full = (found[0]["scanned"] or 0) >= limit
    if not full:  # everything below the horizon was looked at
        reached = max(reached, Position.before(int(found[0]["horizon"])))
    return Scan(events, reached, skipped_tail, full)


async def next_tx(conn: asyncpg.Connection, tenant: str) -> int:
    """The current snapshot's xmax: no transaction with this id or a larger one had started
    writing when it was taken."""
    return int(await conn.fetchval(_NEXT_TX, tenant))


async def runs_of(
    conn: asyncpg.Connection, tenant: str, run_ids: Sequence[str]
) -> dict[str, RunRecord]:
    """The runs the events belong to (for their typed payloads and owners)."""
    if not run_ids:
        return {}
    found = await conn.fetch(_RUNS, tenant, sorted(set(run_ids)))
    return {r["run_id"]: rows.run_of(r) for r in found}
