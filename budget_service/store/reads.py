"""Budget SQL that reads runs, writes scope budgets, and serves the sweeper."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from budget_service.domain.policy import (
    Dimension,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
)
from budget_service.domain.records import PoolBalance, PoolKey, RunRecord, StoredScopeBudget
from budget_service.domain.run_state import BalanceRef
from budget_service.store import rows

_GRANTED_SUMS = ", ".join(
    f"coalesce(sum(h.granted_{s}), 0)::bigint AS overdue_{s}"
    for s in (*rows.SUFFIXES, "model_calls")
)

# The current window of a pooled budget and when it ends, by the engine's window rules (the
# functions decide_v1 keys pool rows by) on the database clock.
_CURRENT_WINDOW = (
    "budget.window_start_v1(s.window_kind, now()) AS current_window,"
    " budget.window_end_v1(s.window_kind, budget.window_start_v1(s.window_kind, now()))"
    " AS current_window_end"
)

# A scope budget with its newest balance row and what overdue holds still hold on that row.
# Holds past expires_at no longer count even before they are marked (database clock).
# `cardinality(h.pool_scopes) > 0` fits index holds_pooled_by_expiry (migration 0020): the
# tenant's overdue holds on pools are read, never its open holds in flight.
_POOL_VIEW = f"""
SELECT s.*, b.window_start AS balance_window, {_CURRENT_WINDOW},
    {", ".join(f"b.consumed_{x} AS balance_consumed_{x}" for x in rows.SUFFIXES)},
    {", ".join(f"b.held_{x} AS balance_held_{x}" for x in rows.SUFFIXES)},
    b.consumed_model_calls AS balance_consumed_model_calls,
    b.held_model_calls AS balance_held_model_calls,
    {", ".join(f"o.overdue_{x}" for x in rows.SUFFIXES)}, o.overdue_model_calls
FROM budget.scope_budgets s
LEFT JOIN LATERAL (
    SELECT * FROM budget.pool_balances b
    WHERE b.tenant_id = $1 AND b.scope = s.scope AND b.scope_id = s.scope_id
    ORDER BY b.window_start DESC LIMIT 1) b ON true
LEFT JOIN LATERAL (
    SELECT {_GRANTED_SUMS}
    FROM budget.holds h,
         unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows) AS k(scope, scope_id, window_start)
    WHERE h.tenant_id = $1 AND h.state = 'open' AND cardinality(h.pool_scopes) > 0
      AND h.expires_at <= now()
      AND k.scope = s.scope AND k.scope_id = s.scope_id AND k.window_start = b.window_start
) o ON true"""

# One statement, so the run and its pools come from one snapshot without a transaction.
_RUN_SNAPSHOT = f"""
SELECT r.*, now() AS db_now,
    (SELECT ARRAY[{", ".join(f"coalesce(sum(h.granted_{s}), 0)::bigint" for s in rows.SUFFIXES)}]
     FROM budget.holds h
     WHERE h.tenant_id = $1 AND h.run_id = r.run_id
       AND h.state = 'open' AND h.expires_at <= now()) AS own_overdue,
    (SELECT coalesce(json_agg(v), '[]') FROM ({_POOL_VIEW}
        JOIN unnest(r.pool_scopes, r.pool_scope_ids) AS p(scope, scope_id)
          ON s.scope = p.scope AND s.scope_id = p.scope_id
        WHERE s.tenant_id = $1 AND s.kind = 'pooled') v) AS pools
FROM budget.runs r"""

_READ_RUN = f"{_RUN_SNAPSHOT} WHERE r.tenant_id = $1 AND r.run_id = $2"

# Several runs of one tenant (Check, batched by servicekit/coalesce.py): one key lookup per
# run id (LATERAL ... LIMIT 1), so an unanalyzed table cannot turn the list into a scan.
# The statement enters the tenant itself, so Check stays one round trip with no transaction:
# set_config(..., true) is local to the statement's own transaction, and the run ids are
# unnested from an expression of its result, so every read of a table is a LATERAL step after
# it (a nested loop runs its outer side first). Were it ever evaluated later, the policies
# would see no tenant and the read would find nothing: it fails closed, never open.
_READ_RUNS = f"""
SELECT one.* FROM (SELECT set_config('ration.tenant_id', $1, true) AS tenant) AS entered
CROSS JOIN LATERAL unnest(CASE WHEN entered.tenant = $1 THEN $2::text[] END) AS wanted (run_id)
CROSS JOIN LATERAL (
    {_RUN_SNAPSHOT} WHERE r.tenant_id = $1 AND r.run_id = wanted.run_id LIMIT 1
) AS one"""

_GET_SCOPE_BUDGET = f"""
SELECT v.*, now() AS db_now FROM ({_POOL_VIEW}
    WHERE s.tenant_id = $1 AND s.scope = $2 AND s.scope_id = $3 AND s.kind = $4) v"""

_SCOPE_BUDGETS_OF = """
SELECT * FROM budget.scope_budgets
WHERE tenant_id = $1 AND (scope, scope_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))"""

_PUT_SCOPE_BUDGET = """
INSERT INTO budget.scope_budgets (
    tenant_id, scope, scope_id, kind, max_tokens, max_cost_nanos, max_tool_calls, max_retries,
    model_allow, model_deny, threshold_percent, on_exhaustion, window_kind, enforcement,
    model_match, max_model_calls)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, nullif($15, ''), $16)
ON CONFLICT (tenant_id, scope, scope_id, kind) DO UPDATE SET
    max_tokens = EXCLUDED.max_tokens, max_cost_nanos = EXCLUDED.max_cost_nanos,
    max_tool_calls = EXCLUDED.max_tool_calls, max_retries = EXCLUDED.max_retries,
    model_allow = EXCLUDED.model_allow, model_deny = EXCLUDED.model_deny,
    threshold_percent = EXCLUDED.threshold_percent, on_exhaustion = EXCLUDED.on_exhaustion,
    window_kind = EXCLUDED.window_kind, enforcement = EXCLUDED.enforcement,
    model_match = EXCLUDED.model_match, max_model_calls = EXCLUDED.max_model_calls,
    version = budget.scope_budgets.version + 1, updated_at = EXCLUDED.updated_at
RETURNING version, updated_at"""

_DELETE_SCOPE_BUDGET = """
DELETE FROM budget.scope_budgets
WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND kind = $4"""

_RUN = "SELECT * FROM budget.runs WHERE tenant_id = $1 AND run_id = $2"

_EVENTS = """
SELECT seq, type, payload_json, created_at FROM budget.events
WHERE tenant_id = $1 AND run_id = $2 AND seq > $3
ORDER BY seq LIMIT $4"""

# Cross-tenant upkeep: SECURITY DEFINER functions of migration 0005, the one narrow way past
# row-level security (each does one fixed thing and returns ids, counts or balances).
_OVERDUE_RUNS = "SELECT tenant_id, run_id FROM budget.overdue_runs($1)"

_OPEN_HOLDS = "SELECT budget.open_hold_count()"

_ALL_POOLS = "SELECT pool FROM budget.pool_gauges() AS pool"


@dataclass(frozen=True)
class PoolView:
    """A pooled scope budget with its current window's balance (zero if not started yet)."""

    budget: ScopeBudget
    balance: PoolBalance
    window_end: datetime | None = None  # when the current window ends (None: never renews)


@dataclass(frozen=True)
class RunSnapshot:
    run: RunRecord
    now: datetime
    overdue: Mapping[Dimension, int]  # this run's holds past expiry: no longer counted
    pools: tuple[PoolView, ...]


def _timestamp(value: Any) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _pool_view(row: Mapping[str, Any]) -> PoolView:
    budget = rows.scope_budget_of(row)
    key = PoolKey(BalanceRef(budget.scope, budget.scope_id), _timestamp(row["current_window"]))
    end = row["current_window_end"]
    window_end = None if end is None else _timestamp(end)
    latest = row["balance_window"]
    if latest is None or _timestamp(latest) != key.window_start:
        return PoolView(budget, PoolBalance(key), window_end)
    return PoolView(
        budget,
        PoolBalance(
            key,
            rows.amounts_of(row, "balance_consumed"),
            rows.amounts_of(row, "balance_held"),
            rows.amounts_of(row, "overdue"),
            # budget.pool_gauges() rows carry them since 0.2.0 (store/functions/pool_gauges.sql).
            int(row.get("balance_consumed_model_calls") or 0),
            int(row.get("balance_held_model_calls") or 0),
            int(row.get("overdue_model_calls") or 0),
        ),
        window_end,
    )


async def read_run(conn: asyncpg.Connection, tenant: str, run_id: str) -> RunSnapshot | None:
    row = await conn.fetchrow(_READ_RUN, tenant, run_id)
    return None if row is None else _snapshot(row)


async def read_runs(
    conn: asyncpg.Connection, tenant: str, run_ids: Sequence[str]
) -> dict[str, RunSnapshot]:
    """read_run of several runs in one statement, which enters the tenant itself (needs no
    transaction of its own); unknown run ids are absent."""
    rows_found = await conn.fetch(_READ_RUNS, tenant, list(run_ids))
    return {row["run_id"]: _snapshot(row) for row in rows_found}


def _snapshot(row: asyncpg.Record) -> RunSnapshot:
    now = row["db_now"]
    pools = tuple(_pool_view(p) for p in json.loads(row["pools"]))
    overdue = dict(zip(Dimension, row["own_overdue"], strict=True))
    return RunSnapshot(rows.run_of(row), now, overdue, pools)


async def get_run(conn: asyncpg.Connection, tenant: str, run_id: str) -> RunRecord | None:
    row = await conn.fetchrow(_RUN, tenant, run_id)
    return None if row is None else rows.run_of(row)


async def scope_budgets_of(
    conn: asyncpg.Connection, tenant: str, owners: Sequence[BalanceRef]
) -> list[ScopeBudget]:
    found = await conn.fetch(
        _SCOPE_BUDGETS_OF, tenant, [o.scope.value for o in owners], [o.scope_id for o in owners]
    )
    return [rows.scope_budget_of(r) for r in found]


async def put_scope_budget(
    conn: asyncpg.Connection, tenant: str, budget: ScopeBudget
) -> StoredScopeBudget:
    p = budget.policy
    row = await conn.fetchrow(
        _PUT_SCOPE_BUDGET,
        tenant,
        budget.scope.value,
        budget.scope_id,
        budget.kind.value,
        *(p.limit(d) for d in Dimension),
        None if p.model_allow is None else list(p.model_allow),
        list(p.model_deny),
        p.threshold_percent,
        p.on_exhaustion.value,
        budget.window.value,
        budget.enforcement.value,
        budget.model_match,
        budget.max_model_calls,
    )
    return StoredScopeBudget(budget, row["version"], row["updated_at"])


async def get_scope_budget(
    conn: asyncpg.Connection, tenant: str, scope: Scope, scope_id: str, kind: ScopeBudgetKind
) -> tuple[StoredScopeBudget, PoolView | None] | None:
    row = await conn.fetchrow(_GET_SCOPE_BUDGET, tenant, scope.value, scope_id, kind.value)
    if row is None:
        return None
    stored = StoredScopeBudget(rows.scope_budget_of(row), row["version"], row["updated_at"])
    pooled = kind is ScopeBudgetKind.POOLED
    return stored, _pool_view(row) if pooled else None


async def delete_scope_budget(
    conn: asyncpg.Connection, tenant: str, scope: Scope, scope_id: str, kind: ScopeBudgetKind
) -> None:
    await conn.execute(_DELETE_SCOPE_BUDGET, tenant, scope.value, scope_id, kind.value)


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    type: str
    payload_json: str
    created_at: datetime


async def list_events(
    conn: asyncpg.Connection, tenant: str, run_id: str, after_seq: int, limit: int
) -> list[StoredEvent]:
    found = await conn.fetch(_EVENTS, tenant, run_id, after_seq, limit)
    return [StoredEvent(r["seq"], r["type"], r["payload_json"], r["created_at"]) for r in found]


async def overdue_runs(conn: asyncpg.Connection, limit: int) -> list[tuple[str, str]]:
    return [(r["tenant_id"], r["run_id"]) for r in await conn.fetch(_OVERDUE_RUNS, limit)]


async def count_open_reservations(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(_OPEN_HOLDS))


async def all_pools(conn: asyncpg.Connection) -> list[tuple[str, PoolView]]:
    """Every tenant's pooled budgets with their current window's balance (for gauges)."""
    found = [json.loads(r["pool"]) for r in await conn.fetch(_ALL_POOLS)]
    return [(p["tenant_id"], _pool_view(p)) for p in found]
