"""The engine's cost does not grow with the tenant (issue 23, DESIGN 6): a batch on a tenant
with 100k runs, 1M holds and a long request log reads as few pages as on a fresh tenant.

The statements measured are the engine's own, run by decide_v2 and decide_v1 (reserve,
consume, release) and by a read-only Check batch, and the reads of GetRun and GetScopeBudget
(store/reads.py): `auto_explain` (log_nested_statements) logs the plan of every statement
inside the engine, which must probe by key (no sequential scan, no `= ANY` key list applied
as a filter over the tenant, no hash or merge join over runs, holds, replies or pool rows, no
rows read and thrown away); and `EXPLAIN (ANALYZE, BUFFERS)` of each call counts every page
its nested statements touch, which must not grow with the tenant. As the application role
(row-level security on), under `plan_cache_mode = force_generic_plan` (the plans the engine
keeps), with plans made on empty tables and kept while the tenant grows, and after ANALYZE
with the big tenant among 2,000 small ones (a generic plan is costed for the average tenant).
On fa194cd the runs lock filtered the tenant's runs by `= ANY`.

One in ten of the big tenant's holds is open (due in a day, a few overdue), held on the pool
the hot runs draw on, beside a backlog of overdue holds on no pool (its own and another
tenant's). On dd45b49 ending a hold (Consume, Release) probed the tenant's open holds by
expiry and threw 100,505 of them away per call; the runs lock's overdue check and the pool
sums walked every tenant's overdue holds; the reads walked the tenant's overdue holds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from budget_service.store import reads as store_reads

BIG, FRESH = "plans-big", "plans-fresh"
RUNS, HOLDS, REPLIES, OLD_WINDOWS = 100_000, 1_000_000, 200_000, 20_000
HOT = ("run-000000", "run-000001", "run-000002")  # the runs every measured batch touches

# A tenant's rows, inserted by the superuser (row-level security does not apply to it).
_SCOPE = """
INSERT INTO budget.scope_budgets (tenant_id, scope, scope_id, kind, max_tokens, window_kind,
                                  enforcement)
VALUES ($1, 'project', 'proj', 'pooled', 1000000000000, 'day', 'hard')"""
_RUNS = """
INSERT INTO budget.runs (tenant_id, run_id, project_id, workflow_id, agent_id, open_fingerprint,
    state, max_tokens, max_cost_nanos, max_tool_calls, threshold_percent, on_exhaustion, binding,
    model_lists, pool_scopes, pool_scope_ids, scope_advisory)
SELECT $1, 'run-' || lpad(g::text, 6, '0'), 'proj', 'wf', 'agent', '\\x00', 'active',
    1000000000000, 1000000000000, 1000000, 80, 'fail', '{}', '[]', '{project}', '{proj}', false
FROM generate_series($3::integer, $3::integer + $2::integer - 1) g"""
# Settled holds spread over every run (what a long-lived tenant keeps), created an hour ago.
_HOLDS = """
INSERT INTO budget.holds (tenant_id, run_id, reservation_id, model, requested_tokens,
    requested_cost_nanos, requested_tool_calls, requested_retries, granted_tokens,
    granted_cost_nanos, granted_tool_calls, granted_retries, pool_scopes, pool_scope_ids,
    pool_windows, state, policy_version, created_at, expires_at, ended_at)
SELECT $1, 'run-' || lpad((g % $3::integer)::text, 6, '0'), 'old-' || g, 'm',
    1, 0, 0, 0, 1, 0, 0, 0, '{}', '{}', '{}', 'consumed', 1, now() - interval '1 hour',
    now() - interval '50 minutes', now() - interval '55 minutes'
FROM generate_series(0, $2::integer - 1) g"""
# Open holds (what a busy tenant has in flight), one in ten of its holds, on other runs than
# the hot ones: due in a day (or, $4 of them, overdue a minute), held on the project pool's
# current window, as a Reserve of a run drawing on that pool leaves them. The pool row's held
# includes them, as the engine keeps it.
OPEN_HOLDS, OVERDUE = HOLDS // 10, 5
_OPEN_HOLDS = """
WITH window_start AS (SELECT budget.window_start_v1('day', now()) AS w),
added AS (
    INSERT INTO budget.holds (tenant_id, run_id, reservation_id, model, requested_tokens,
        requested_cost_nanos, requested_tool_calls, requested_retries, granted_tokens,
        granted_cost_nanos, granted_tool_calls, granted_retries, pool_scopes, pool_scope_ids,
        pool_windows, state, policy_version, created_at, expires_at)
    SELECT $1, 'run-' || lpad((10 + g % ($3::integer - 10))::text, 6, '0'), 'open-' || g, 'm',
        1, 0, 0, 0, 1, 0, 0, 0, '{project}', '{proj}', ARRAY[w.w], 'open', 1, now(),
        now() + CASE WHEN g < $4::integer THEN interval '-1 minute' ELSE interval '1 day' END
    FROM window_start w, generate_series(0, $2::integer - 1) g
    RETURNING granted_tokens)
UPDATE budget.pool_balances p SET held_tokens = p.held_tokens + (SELECT sum(granted_tokens)
    FROM added)
FROM window_start w
WHERE p.tenant_id = $1 AND p.scope = 'project' AND p.scope_id = 'proj'
  AND p.window_start = w.w"""
_REPLIES = """
INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)
SELECT $1, 'old-req-' || g, '\\x00', '\\x00' FROM generate_series(0, $2::integer - 1) g"""
_WINDOWS = """
INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
SELECT $1, 'project', 'old-' || g, '2020-01-01'::timestamptz
FROM generate_series(0, $2::integer - 1) g"""

# A backlog of overdue holds on no pool (the sweeps fell behind), of another tenant and of
# the big one's other runs: no lookup may walk them, neither the upkeep index of every
# tenant's overdue holds (migration 0018) nor the tenant's own by expiry (0020).
BACKLOG, BACKLOG_HOLDS, BIG_BACKLOG = "plans-backlog", 2_000, 500
_BACKLOG = """
INSERT INTO budget.holds (tenant_id, run_id, reservation_id, model, requested_tokens,
    requested_cost_nanos, requested_tool_calls, requested_retries, granted_tokens,
    granted_cost_nanos, granted_tool_calls, granted_retries, pool_scopes, pool_scope_ids,
    pool_windows, state, policy_version, created_at, expires_at)
SELECT $1, 'run-' || (g % 100), 'overdue-' || g, 'm', 1, 0, 0, 0, 1, 0, 0, 0, '{}', '{}', '{}',
    'open', 1, now() - interval '1 hour', now() - interval '10 minutes'
FROM generate_series(0, $2::integer - 1) g"""

# Many small tenants (5 runs and 20 settled holds each), as a shared deployment has.
SMALL_TENANTS = 2_000
_SMALL_TENANTS = """
WITH runs AS (
    INSERT INTO budget.runs (tenant_id, run_id, project_id, workflow_id, agent_id,
        open_fingerprint, state, threshold_percent, on_exhaustion, binding, model_lists,
        pool_scopes, pool_scope_ids, scope_advisory)
    SELECT 'small-' || t, 'run-' || r, 'proj', 'wf', 'agent', '\\x00', 'active', 80, 'fail', '{}',
        '[]', '{}', '{}', false
    FROM generate_series(1, $1::integer) t, generate_series(1, 5) r
    RETURNING tenant_id, run_id)
INSERT INTO budget.holds (tenant_id, run_id, reservation_id, model, requested_tokens,
    requested_cost_nanos, requested_tool_calls, requested_retries, granted_tokens,
    granted_cost_nanos, granted_tool_calls, granted_retries, pool_scopes, pool_scope_ids,
    pool_windows, state, policy_version, created_at, expires_at, ended_at)
SELECT r.tenant_id, r.run_id, 'old-' || h, 'm', 1, 0, 0, 0, 1, 0, 0, 0, '{}', '{}', '{}',
    'consumed', 1, now(), now(), now()
FROM runs r, generate_series(1, 4) h"""
_TABLES = (
    "budget.runs",
    "budget.holds",
    "budget.request_log",
    "budget.pool_balances",
    "budget.scope_budgets",
)

_ITEM = "budget.decide_item_v2"
_V2 = f"SELECT * FROM budget.decide_v2($1, false, $2, $3::{_ITEM}[])"
_V1 = (
    "SELECT * FROM budget.decide_v1($1, false, $2, $3::text[], $4::text[], $5::bytea[],"
    " $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[],"
    " $12::bigint[], $13::boolean[], $14::integer[])"
)

Item = tuple[str, str, bytes, str, str, str, int, int, int, int, bool, int]


def batch(tenant: str, round_no: int) -> list[Item]:
    """One round on the hot runs: a Reserve each, and the previous round's holds consumed,
    released and consumed with usage beyond the hold (every kind of item and lookup)."""
    items: list[Item] = []

    def item(kind: str, run: str, reservation: str, tokens: int) -> Item:
        request = f"{tenant}-{round_no}-{len(items)}"
        return (kind, request, b"fp", run, reservation, "m", tokens, 0, 0, 0, False, 60)

    for j, run in enumerate(HOT):
        items.append(item("reserve", run, f"res-{round_no}-{j}", 10))
        if round_no > 0:
            kind = "release" if j == 1 else "consume"
            items.append(item(kind, run, f"res-{round_no - 1}-{j}", 0 if j == 1 else 12))
    return items


def checks() -> list[Item]:
    return [("check", "", b"", run, "", "m", 5, 0, 0, 0, False, 0) for run in HOT]


# The tables a batch probes by its own keys: a scan of them must be an index probe per key.
PROBED = frozenset({"runs", "holds", "request_log", "pool_balances", "scope_budgets"})
_AUTO_EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_format = json",
    "SET client_min_messages = log",
)


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found += nodes(child)
    return found


def tenant_reads(statement: dict[str, Any]) -> list[str]:
    """What in one nested statement's plan reads more of a tenant than the batch's keys: a
    sequential scan, a key list applied as a filter instead of an index condition, a hash or
    merge join over a probed table, many rows read and thrown away, or just many rows read."""
    wrong = []
    text = statement.get("Query Text", "")
    for node in nodes(statement["Plan"]):
        kind, table = node["Node Type"], node.get("Relation Name")
        under = {str(n.get("Relation Name")) for n in nodes(node)[1:]} & PROBED
        if kind in ("Hash Join", "Merge Join") and under:
            wrong.append(f"{kind} over {sorted(under)} in {text!r}")
        if table not in PROBED:
            continue
        # scope_budgets is configuration, a few rows a tenant: reading its one page whole is
        # right; thrown-away rows (below) still catch it growing.
        if kind == "Seq Scan" and table != "scope_budgets":
            wrong.append(f"Seq Scan on {table} in {text!r}")
        if "= ANY" in node.get("Filter", ""):
            wrong.append(f"{node['Filter']} filtered on {table} in {text!r}")
        if node.get("Rows Removed by Filter", 0) > 100:
            wrong.append(f"{node['Rows Removed by Filter']} rows of {table} thrown away: {text!r}")
        # A batch has a handful of keys: reading many rows means reading the tenant (e.g. a
        # join that walks the tenant's rows and looks each up among the keys).
        read = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        if read > 100:
            wrong.append(f"{read} rows of {table} read: {text!r}")
    return wrong


def pages(plan: Any) -> int:
    """Shared pages a statement touched (hit or read), its nested statements included."""
    top = json.loads(plan)[0]["Plan"] if isinstance(plan, str) else plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def explain(conn: asyncpg.Connection, sql: str, *args: Any) -> int:
    plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    return pages(plan)


def v1_args(items: Sequence[Item]) -> list[list[Any]]:
    """The same batch as decide_v1's twelve parallel arrays (the previous release's call)."""
    return [list(column) for column in zip(*items, strict=True)]


# The reads of GetRun (and OpenRun's reply) and GetScopeBudget, prepared once per session as
# a server keeps them (generic plans under force_generic_plan), run in the tenant they read.
READS = {
    "get_run": (store_reads._READ_RUN, f"'{HOT[0]}'"),
    "get_scope_budget": (store_reads._GET_SCOPE_BUDGET, "'project', 'proj', 'pooled'"),
}


async def prepare_reads(conn: asyncpg.Connection) -> None:
    for name, (sql, _) in READS.items():
        await conn.execute(f"PREPARE {name} AS {sql}")


async def measure(conn: asyncpg.Connection, tenant: str, round_no: int) -> dict[str, int]:
    """Pages of one decide_v2 batch, one decide_v1 batch, one read-only Check batch and each
    of the reads."""
    v2 = await explain(conn, _V2, tenant, False, batch(tenant, round_no))
    v1 = await explain(conn, _V1, tenant, False, *v1_args(batch(tenant, round_no + 1)))
    check = await explain(conn, _V2, tenant, True, checks())
    found = {"decide_v2": v2, "decide_v1": v1, "check": check}
    await conn.execute("SELECT set_config('ration.tenant_id', $1, false)", tenant)
    for name, (_, args) in READS.items():
        found[name] = await explain(conn, f"EXECUTE {name}('{tenant}', {args})")
    return found


async def compare(conn: asyncpg.Connection, first_round: int, when: str) -> None:
    """Two warm-up rounds per tenant (plans, the day's pool row), then one measured: the
    pages of each call, and the plan of every statement the engine ran in it."""
    for tenant in (BIG, FRESH):
        await measure(conn, tenant, first_round)
        await measure(conn, tenant, first_round + 2)
    logged: list[str] = []

    def listen(_: Any, message: Any) -> None:
        logged.append(message.message)

    conn.add_log_listener(listen)
    try:
        big = await measure(conn, BIG, first_round + 4)
        fresh = await measure(conn, FRESH, first_round + 4)
    finally:
        conn.remove_log_listener(listen)
    plans = [json.loads(m.partition("\n")[2] or m) for m in logged if '"Plan"' in m]
    explained = await conn.fetchval("SELECT current_setting('auto_explain.log_format', true)")
    assert plans or explained is None, "auto_explain logged no plan"
    wrong = [w for plan in plans for w in tenant_reads(plan)]
    assert not wrong, (when, wrong)
    for statement, pages_fresh in fresh.items():
        # A few pages more for deeper index trees; a scan of the tenant reads thousands.
        assert big[statement] <= 2 * pages_fresh + 40, (when, statement, big, fresh)


async def plan_session(owner: asyncpg.Connection, app: asyncpg.Connection, app_url: str) -> None:
    """`app` becomes the application role with auto_explain loaded by the superuser before
    (the embedded server of a run without TEST_DATABASE_URL ships no auto_explain: there only
    the pages are compared); `owner` turns autovacuum off, so statistics come only when a
    test says so."""
    with contextlib.suppress(asyncpg.UndefinedFileError):
        for statement in _AUTO_EXPLAIN:
            await app.execute(statement)
    await app.execute(f'SET ROLE "{urlsplit(app_url).username}"')
    for table in _TABLES:
        await owner.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")


async def test_a_batch_reads_no_more_pages_on_a_big_tenant_than_on_a_fresh_one(
    app_database_url: str, database_url: str
) -> None:
    owner = await asyncpg.connect(database_url)  # the superuser: row-level security aside
    app = await asyncpg.connect(database_url)
    try:
        await plan_session(owner, app, app_database_url)
        for tenant, runs in ((BIG, len(HOT)), (FRESH, len(HOT))):
            await owner.execute(_SCOPE, tenant)
            await owner.execute(_RUNS, tenant, runs, 0)
        await app.execute("SET plan_cache_mode = force_generic_plan")
        await prepare_reads(app)
        # A fresh deployment: the engine's plans are made while the tables are nearly empty
        # and kept (nothing invalidates them) while the big tenant grows, never analyzed.
        await compare(app, 0, "planned on empty tables")
        await owner.execute(_RUNS, BIG, RUNS - len(HOT), len(HOT))
        await owner.execute(_HOLDS, BIG, HOLDS - OPEN_HOLDS, RUNS)
        await owner.execute(_OPEN_HOLDS, BIG, OPEN_HOLDS, RUNS, OVERDUE)
        await owner.execute(_BACKLOG, BACKLOG, BACKLOG_HOLDS)
        await owner.execute(_BACKLOG, BIG, BIG_BACKLOG)
        await owner.execute(_REPLIES, BIG, REPLIES)
        await owner.execute(_WINDOWS, BIG, OLD_WINDOWS)
        await compare(app, 10, "not analyzed")
        # Statistics: the big tenant among many small ones; a generic plan is costed for the
        # average tenant (1/n_distinct of the rows), which the big one is not.
        await owner.execute(_SMALL_TENANTS, SMALL_TENANTS)
        await owner.execute("ANALYZE " + ", ".join(_TABLES))
        await compare(app, 20, "analyzed")
    finally:
        await app.close()
        await owner.close()
