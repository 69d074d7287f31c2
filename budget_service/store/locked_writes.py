"""Budget SQL of the locked write path: lock a run and its pools, expire, write all changes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from budget_service.domain.policy import BudgetLimits, Dimension, Scope, Window
from budget_service.domain.records import (
    PoolBalance,
    PoolConfig,
    PoolKey,
    ReservationRecord,
    RunRecord,
)
from budget_service.domain.run_state import BalanceRef
from budget_service.store import rows

# Citus routes a statement to one shard when every table in it is filtered on the tenant
# parameter itself ($1, not a correlated r.tenant_id), and cannot return anonymous records
# (ROW(...)) from a worker: so these statements filter on $1 and return plain rows.

# Locks the run first (every writer does), so its holds are stable for the rest of the call.
# Subqueries read the statement snapshot: has_overdue may miss a hold that became overdue while
# we waited for the lock, which only means it is expired by the next call or the sweeper.
_LOCK_RUN = """
SELECT r.*, now() AS db_now,
    EXISTS (SELECT 1 FROM budget.holds h
            WHERE h.tenant_id = $1 AND h.run_id = r.run_id
              AND h.state = 'open' AND h.expires_at <= now()) AS has_overdue
FROM budget.runs r
WHERE r.tenant_id = $1 AND r.run_id = $2
FOR UPDATE OF r"""

# The pooled budgets a locked run draws on, with the start of their newest balance row (so the
# caller knows whether the current window's row must be created first).
_POOL_CONFIGS = """
SELECT s.scope, s.scope_id, s.window_kind, s.max_tokens, s.max_cost_nanos, s.max_tool_calls,
    s.max_retries, s.max_model_calls,
    (SELECT max(b.window_start) FROM budget.pool_balances b
     WHERE b.tenant_id = $1 AND b.scope = s.scope AND b.scope_id = s.scope_id) AS latest
FROM budget.scope_budgets s
JOIN unnest($2::text[], $3::text[]) AS k(scope, scope_id)
  ON s.scope = k.scope AND s.scope_id = k.scope_id
WHERE s.tenant_id = $1 AND s.kind = 'pooled'"""

_INSERT_POOLS = """
INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
SELECT $1, k.scope, k.scope_id, k.window_start
FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS k(scope, scope_id, window_start)
ON CONFLICT DO NOTHING"""

# Pool rows in the canonical order (narrowest scope, id, window) so that concurrent calls on
# runs sharing pools cannot deadlock: the current windows plus those of the holds this call may
# end (overdue ones, the named one, or all open ones on close).
_LOCK_POOLS = f"""
SELECT p.scope, p.scope_id, p.window_start, {rows.columns("consumed")}, {rows.columns("held")},
    p.consumed_model_calls, p.held_model_calls
FROM budget.pool_balances p
WHERE p.tenant_id = $1 AND (p.scope, p.scope_id, p.window_start) IN (
    SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[])
    UNION
    SELECT unnest(h.pool_scopes), unnest(h.pool_scope_ids), unnest(h.pool_windows)
    FROM budget.holds h
    WHERE h.tenant_id = $1 AND h.run_id = $5 AND h.state = 'open'
      AND (h.expires_at <= now() OR h.reservation_id = ANY($6::text[]) OR $7))
ORDER BY array_position('{{workflow,agent,project}}'::text[], p.scope), p.scope_id, p.window_start
FOR UPDATE OF p"""

_GRANTED_SUMS = ", ".join(f"sum(h.granted_{s})::bigint" for s in (*rows.SUFFIXES, "model_calls"))

# Run after the pool locks are held, so they see the locked rows: this run's overdue holds end
# here, and other runs' overdue holds on the locked pools are summed (they no longer count,
# though their runs have not marked them yet; ending one needs these pool locks).
_EXPIRE = f"""
UPDATE budget.holds SET state = 'expired', ended_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND state = 'open' AND expires_at <= now()
RETURNING {rows.HOLD_COLUMNS}"""

_OTHER_OVERDUE = f"""
SELECT k.scope, k.scope_id, k.window_start, {_GRANTED_SUMS}
FROM budget.holds h,
     unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows) AS k(scope, scope_id, window_start)
WHERE h.tenant_id = $1 AND h.state = 'open' AND h.expires_at <= now() AND h.run_id <> $2
  AND (k.scope, k.scope_id, k.window_start) IN (
      SELECT * FROM unnest($3::text[], $4::text[], $5::timestamptz[]))
GROUP BY 1, 2, 3"""

_REQUEST_DONE = "SELECT 1 FROM budget.request_log WHERE tenant_id = $1 AND request_id = $2"

_HOLD = f"""
SELECT {rows.HOLD_COLUMNS} FROM budget.holds
WHERE tenant_id = $1 AND run_id = $2 AND reservation_id = $3"""

_OPEN_HOLDS = f"""
SELECT {rows.HOLD_COLUMNS} FROM budget.holds
WHERE tenant_id = $1 AND run_id = $2 AND state = 'open' ORDER BY created_at, reservation_id"""


@dataclass(frozen=True)
class LockedRow:
    """What locking a run reads: the run, the database clock and its pools' configuration."""

    run: RunRecord
    now: datetime
    has_overdue: bool
    pools: tuple[tuple[PoolConfig, datetime | None], ...]  # config, newest balance row window


async def lock_run(
    conn: asyncpg.Connection, tenant: str, run_id: str, *, skip_locked: bool = False
) -> LockedRow | None:
    sql = _LOCK_RUN + (" SKIP LOCKED" if skip_locked else "")
    row = await conn.fetchrow(sql, tenant, run_id)
    if row is None:
        return None
    run = rows.run_of(row)
    found = (
        await conn.fetch(
            _POOL_CONFIGS,
            tenant,
            [p.scope.value for p in run.pools],
            [p.scope_id for p in run.pools],
        )
        if run.pools
        else []
    )
    pools = tuple(
        (
            PoolConfig(
                BalanceRef(Scope(c["scope"]), c["scope_id"]),
                BudgetLimits(
                    c["max_tokens"], c["max_cost_nanos"], c["max_tool_calls"], c["max_retries"]
                ),
                Window(c["window_kind"]),
                c["max_model_calls"],
            ),
            c["latest"],
        )
        for c in found
    )
    return LockedRow(run, row["db_now"], row["has_overdue"], pools)


async def request_done(conn: asyncpg.Connection, tenant: str, request_id: str) -> bool:
    """Whether a request with this id has committed (read after the run lock is held)."""
    return await conn.fetchval(_REQUEST_DONE, tenant, request_id) is not None


async def insert_pools(conn: asyncpg.Connection, tenant: str, keys: Sequence[PoolKey]) -> None:
    arrays = rows.pool_arrays(keys)
    await conn.execute(
        _INSERT_POOLS,
        tenant,
        arrays["pool_scopes"],
        arrays["pool_scope_ids"],
        [k.window_start for k in keys],
    )


async def lock_pools(
    conn: asyncpg.Connection,
    tenant: str,
    run_id: str,
    keys: Sequence[PoolKey],
    reservation_ids: Sequence[str] = (),
    all_open: bool = False,
) -> dict[PoolKey, PoolBalance]:
    arrays = rows.pool_arrays(keys)
    found = await conn.fetch(
        _LOCK_POOLS,
        tenant,
        arrays["pool_scopes"],
        arrays["pool_scope_ids"],
        [k.window_start for k in keys],
        run_id,
        list(reservation_ids),
        all_open,
    )
    balances = {}
    for r in found:
        key = rows.pool_key_of(r["scope"], r["scope_id"], r["window_start"])
        balances[key] = PoolBalance(
            key,
            rows.amounts_of(r, "consumed"),
            rows.amounts_of(r, "held"),
            consumed_model_calls=r["consumed_model_calls"],
            held_model_calls=r["held_model_calls"],
        )
    return balances


async def expire_overdue(
    conn: asyncpg.Connection, tenant: str, run_id: str, pools: Sequence[PoolKey]
) -> tuple[list[ReservationRecord], dict[PoolKey, tuple[dict[Dimension, int], int]]]:
    """Ends this run's overdue holds; returns them and other runs' overdue amounts (and model
    calls) per pool."""
    expired = [rows.reservation_of(r) for r in await conn.fetch(_EXPIRE, tenant, run_id)]
    found = (
        await conn.fetch(
            _OTHER_OVERDUE,
            tenant,
            run_id,
            [k.ref.scope.value for k in pools],
            [k.ref.scope_id for k in pools],
            [k.window_start for k in pools],
        )
        if pools
        else []
    )
    other = {
        rows.pool_key_of(r["scope"], r["scope_id"], r["window_start"]): (
            dict(zip(Dimension, list(r.values())[3:7], strict=True)),
            r[7],
        )
        for r in found
    }
    return expired, other


async def get_reservation(
    conn: asyncpg.Connection, tenant: str, run_id: str, reservation_id: str
) -> ReservationRecord | None:
    row = await conn.fetchrow(_HOLD, tenant, run_id, reservation_id)
    return None if row is None else rows.reservation_of(row)


async def open_reservations(
    conn: asyncpg.Connection, tenant: str, run_id: str
) -> list[ReservationRecord]:
    return [rows.reservation_of(r) for r in await conn.fetch(_OPEN_HOLDS, tenant, run_id)]
