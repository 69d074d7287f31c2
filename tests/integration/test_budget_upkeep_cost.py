"""Upkeep does not grow with the holds tenants keep open (issue 23): the sweeper's search for
overdue holds reads the overdue ones, not every open hold of every tenant, once a second; the
pool gauges read each pool's overdue holds, not every open or overdue hold of its tenant."""

from __future__ import annotations

import json

import asyncpg

# Open holds that expire in a day (a long-lived tenant's in-flight holds), and a few overdue.
_HOLDS = """
INSERT INTO budget.holds (tenant_id, run_id, reservation_id, model, requested_tokens,
    requested_cost_nanos, requested_tool_calls, requested_retries, granted_tokens,
    granted_cost_nanos, granted_tool_calls, granted_retries, pool_scopes, pool_scope_ids,
    pool_windows, state, policy_version, created_at, expires_at)
SELECT $1, 'run-' || (g % 1000), 'res-' || g, 'm', 1, 0, 0, 0, 1, 0, 0, 0, '{}', '{}', '{}',
    'open', 1, now(), now() + $3::text::interval
FROM generate_series(1, $2::integer) g"""


async def pages_of_a_sweep_search(db: asyncpg.Connection) -> int:
    # Once first: a plan made again (after an autovacuum's ANALYZE, say) reads the catalog
    # and the index ends, hundreds of pages that are not the search's.
    await db.fetch("SELECT * FROM budget.overdue_runs(200)")
    plan = await db.fetchval(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM budget.overdue_runs(200)"
    )
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def test_the_sweep_search_reads_the_overdue_holds_not_every_open_one(
    db: asyncpg.Connection,
) -> None:
    await db.execute(_HOLDS, "tenant-a", 5, "-1 minute")
    await db.execute("ANALYZE budget.holds")
    few = await pages_of_a_sweep_search(db)
    assert len(await db.fetch("SELECT * FROM budget.overdue_runs(200)")) == 5
    for tenant in ("tenant-a", "tenant-b"):
        await db.execute(_HOLDS.replace("'res-'", "'far-'"), tenant, 50_000, "1 day")
    many = await pages_of_a_sweep_search(db)
    await db.execute("ANALYZE budget.holds")
    many_analyzed = await pages_of_a_sweep_search(db)
    assert len(await db.fetch("SELECT * FROM budget.overdue_runs(200)")) == 5
    # 100k open holds not yet due: the search still touches a handful of pages.
    assert many <= few + 20, (few, many)
    assert many_analyzed <= few + 20, (few, many_analyzed)


# A pooled project budget with today's balance row, its tenant's open holds on it.
_POOL = """
WITH window_start AS (SELECT budget.window_start_v1('day', now()) AS w),
budget AS (
    INSERT INTO budget.scope_budgets (tenant_id, scope, scope_id, kind, max_tokens,
                                      window_kind, enforcement)
    VALUES ($1, 'project', 'proj', 'pooled', 1000000000, 'day', 'hard'))
INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
SELECT $1, 'project', 'proj', w FROM window_start"""
_POOL_HOLDS = _HOLDS.replace(
    "'{}', '{}', '{}'", "'{project}', '{proj}', ARRAY[budget.window_start_v1('day', now())]"
)


async def pages_of_the_pool_gauges(db: asyncpg.Connection) -> int:
    """Pages of a refresh once its plan is made (as pages_of_a_sweep_search)."""
    await db.fetch("SELECT * FROM budget.pool_gauges()")
    plan = await db.fetchval(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM budget.pool_gauges()"
    )
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def overdue_on_the_pool(db: asyncpg.Connection) -> list[int]:
    pools = [json.loads(r["p"]) for r in await db.fetch("SELECT budget.pool_gauges() AS p")]
    return sorted(int(p["overdue_tokens"]) for p in pools)


async def test_the_pool_gauges_read_the_overdue_holds_on_pools_not_every_open_one(
    db: asyncpg.Connection,
) -> None:
    # The plan the gauges keep, made on a nearly empty table (as on a fresh deployment). On
    # dd45b49 it walked every overdue hold of the tenant, on pools or not: 9 pages, then 117.
    await db.execute("SET plan_cache_mode = force_generic_plan")
    for tenant in ("tenant-a", "tenant-b"):
        await db.execute(_POOL, tenant)
    await db.execute(_POOL_HOLDS, "tenant-a", 5, "-1 minute")
    few = await pages_of_the_pool_gauges(db)
    assert await overdue_on_the_pool(db) == [0, 5]
    # Each tenant's holds in flight on its pool, and a backlog of overdue holds on no pool.
    for tenant in ("tenant-a", "tenant-b"):
        await db.execute(_POOL_HOLDS.replace("'res-'", "'far-'"), tenant, 50_000, "1 day")
        await db.execute(_HOLDS.replace("'res-'", "'late-'"), tenant, 2_000, "-1 minute")
    many = await pages_of_the_pool_gauges(db)
    await db.execute("ANALYZE budget.holds")
    many_analyzed = await pages_of_the_pool_gauges(db)
    assert await overdue_on_the_pool(db) == [0, 5]
    assert many <= few + 20, (few, many)
    assert many_analyzed <= few + 20, (few, many_analyzed)
