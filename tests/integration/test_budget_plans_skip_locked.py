"""A tenant's batch that skips a run locked elsewhere (budget.decide_v3 'skip', issue 24) still
probes by its own keys on a big tenant: the SKIP LOCKED lock of the runs and the probe that
tells a busy run from a missing one read no more of the tenant than the batch's keys.

The rules, the batches and the tenant's rows are tests/integration/test_budget_plans.py's
(auto_explain of every nested statement, plans made on nearly empty tables and kept while the
tenant grows, then after ANALYZE among many small tenants); here one of the hot runs is locked
by another transaction while each measured batch runs.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from tests.integration.test_budget_plans import (
    _HOLDS,
    _REPLIES,
    _RUNS,
    _SCOPE,
    _SMALL_TENANTS,
    _TABLES,
    _WINDOWS,
    HOT,
    OLD_WINDOWS,
    SMALL_TENANTS,
    batch,
    plan_session,
    tenant_reads,
)

TENANT = "plans-skip"
RUNS, HOLDS, REPLIES = 100_000, 200_000, 200_000
_V3 = "SELECT * FROM budget.decide_v3($1, false, 'skip', NULL, $2::budget.decide_item_v2[])"
LOCKED = HOT[1]


async def skip_round(
    app: asyncpg.Connection, owner: asyncpg.Connection, round_no: int
) -> list[str]:
    """One batch on the hot runs while LOCKED is locked by the owner's open transaction."""
    async with owner.transaction():
        await owner.execute(
            "SELECT 1 FROM budget.runs WHERE tenant_id = $1 AND run_id = $2 FOR UPDATE",
            TENANT,
            LOCKED,
        )
        items = batch(TENANT, round_no)
        row = await app.fetchrow(_V3, TENANT, items)
    outcomes: list[str] = row["outcomes"]
    for item, outcome in zip(items, outcomes, strict=True):
        assert (outcome == "busy") == (item[3] == LOCKED), (item, outcome)
    return outcomes


async def checked(app: asyncpg.Connection, owner: asyncpg.Connection, round_no: int) -> None:
    await skip_round(app, owner, round_no)  # warm: the plans of this round's statements
    logged: list[str] = []

    def listen(_: Any, message: Any) -> None:
        logged.append(message.message)

    app.add_log_listener(listen)
    try:
        await skip_round(app, owner, round_no + 2)
    finally:
        app.remove_log_listener(listen)
    plans = [json.loads(m.partition("\n")[2] or m) for m in logged if '"Plan"' in m]
    explained = await app.fetchval("SELECT current_setting('auto_explain.log_format', true)")
    assert plans or explained is None, "auto_explain logged no plan"
    assert any("SKIP LOCKED" in p.get("Query Text", "") for p in plans) or explained is None
    wrong = [w for plan in plans for w in tenant_reads(plan)]
    assert not wrong, (round_no, wrong)


async def test_a_batch_skipping_a_locked_run_probes_by_its_keys_on_a_big_tenant(
    app_database_url: str, database_url: str
) -> None:
    owner = await asyncpg.connect(database_url)  # the superuser: row-level security aside
    app = await asyncpg.connect(database_url)
    try:
        await plan_session(owner, app, app_database_url)
        await owner.execute(_SCOPE, TENANT)
        await owner.execute(_RUNS, TENANT, len(HOT), 0)
        await app.execute("SET plan_cache_mode = force_generic_plan")
        await checked(app, owner, 0)  # planned on nearly empty tables, and kept
        await owner.execute(_RUNS, TENANT, RUNS - len(HOT), len(HOT))
        await owner.execute(_HOLDS, TENANT, HOLDS, RUNS)
        await owner.execute(_REPLIES, TENANT, REPLIES)
        await owner.execute(_WINDOWS, TENANT, OLD_WINDOWS)
        await checked(app, owner, 10)
        await owner.execute(_SMALL_TENANTS, SMALL_TENANTS)
        await owner.execute("ANALYZE " + ", ".join(_TABLES))
        await checked(app, owner, 20)
    finally:
        await app.close()
        await owner.close()
