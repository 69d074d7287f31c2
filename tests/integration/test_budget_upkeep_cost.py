"""Upkeep does not grow with the holds tenants keep open (issue 23): the sweeper's search for
overdue holds reads the overdue ones, not every open hold of every tenant, once a second."""

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
