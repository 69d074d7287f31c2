"""A ReportSpend page reads its own groups, not the window (issue 24, DESIGN 3.10): on a tenant
with 120k rollup rows over 6,000 hours and 20 models (the bench's noisy tenant), a page of one
group by HOUR, DAY or any owner or model reads about the rows that group holds in the window,
plus a probe per key it passes, whatever the statistics or plan cache mode.

`EXPLAIN (ANALYZE, BUFFERS)` of the statement the store runs (store/reports.py), as the
application role (row-level security on): under `plan_cache_mode = force_generic_plan` with
the plans made on empty tables and kept while the tenant grows, then under
`force_custom_plan`, and both again after ANALYZE with the big tenant among 2,000 small ones.
The rows every scan of budget.spend_rollups returned or threw away, over all its loops, must
stay within the page's own group's rows in the window plus a few per key walked; a window
aggregate (GROUP BY over the window, as before migration 0021) read all 120k on every page.
The window is the bench's (a year, its ends off the hour), so its partial first and last hours
come from the ledger, where a run of the tenant has a few consumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from budget_service.domain.spend import SpendFilter, SpendGroupBy, SpendQuery, bucket_start
from budget_service.store.reports import COLUMNS, report_args, report_sql, split_window
from servicekit.db import quote_literal

BIG = "reports-big"
HOURS, MODELS = 6_000, 20
ROWS = HOURS * MODELS
# Owners of the rollup rows: g % n of row g, so each owner's rows spread over every hour.
OWNERS = {"project_id": 40, "workflow_id": 30, "agent_id": 50, "end_user_id": 100, "api_key_id": 25}
RETIRED = 3  # keys with rows only before the window, sorting first: each page 1 passes them
PARTIAL = 10  # consumes in each of the window's partial hours (the ledger's part)
SMALL_TENANTS = 2_000

_ROLLUPS = """
INSERT INTO budget.spend_rollups (tenant_id, hour, project_id, workflow_id, agent_id, model,
    end_user_id, api_key_id, tags_sha256, bucket, tags, cost_nanos, tokens, tool_calls, retries,
    consume_count)
SELECT $1, $2::timestamptz - make_interval(hours => 1 + g / $3::integer),
    'project-' || g % 40, 'workflow-' || g % 30, 'agent-' || g % 50,
    'model-' || lpad((g % $3::integer)::text, 2, '0'), 'end-user-' || g % 100, 'key-' || g % 25,
    sha256(convert_to('{}', 'UTF8')), (g % 8)::smallint, '{}', g % 1000, 100, g % 2, 0, 1
FROM generate_series(0, $4::integer - 1) g"""
# Retired keys: every owner and model 'a-retired-<i>', a year and a half ago.
_RETIRED = """
INSERT INTO budget.spend_rollups (tenant_id, hour, project_id, workflow_id, agent_id, model,
    end_user_id, api_key_id, tags_sha256, bucket, tags, cost_nanos, tokens, tool_calls, retries,
    consume_count)
SELECT $1, $2::timestamptz - interval '540 days' - make_interval(hours => g), k, k, k, k, k, k,
    sha256(convert_to('{}', 'UTF8')), 0, '{}', 1, 1, 0, 0, 1
FROM generate_series(0, 99) g, LATERAL (SELECT 'a-retired-' || g % $3::integer AS k) r"""
# The tenant's runs ('run-0' the one with consumes in the partial hours) and a long ledger of
# grants over the window: a report must probe them by key, never read the tenant's.
RUNS, GRANTS = 20_000, 20_000
_RUNS = """
INSERT INTO budget.runs (tenant_id, run_id, project_id, workflow_id, agent_id, open_fingerprint,
    state, threshold_percent, on_exhaustion, binding, model_lists, pool_scopes, pool_scope_ids,
    scope_advisory)
SELECT $1, 'run-' || g, 'proj', 'wf', 'agent', '\\x00', 'active', 80, 'fail', '{}', '[]', '{}',
    '{}', false
FROM generate_series(0, $2::integer - 1) g"""
_GRANTS = """
INSERT INTO budget.ledger (tenant_id, run_id, decision, request_id, model, policy_version,
    created_at)
SELECT $1, 'run-' || g % $3::integer, 'grant', 'grant-' || g, 'm', 1,
    $2::timestamptz - make_interval(mins => 20 * g)
FROM generate_series(0, $4::integer - 1) g"""
# Consumes of run-0 at the given instant (the trigger rolls them up, in that hour).
_CONSUMES = """
INSERT INTO budget.ledger (tenant_id, run_id, decision, request_id, model, policy_version,
    consumed_tokens, consumed_cost_nanos, created_at)
SELECT $1, 'run-0', 'consume', 'partial-' || g || '-' || $2::timestamptz, 'm', 1, 7, 3,
    $2::timestamptz
FROM generate_series(1, $3::integer) g"""
_SMALL = """
INSERT INTO budget.spend_rollups (tenant_id, hour, project_id, workflow_id, agent_id, model,
    end_user_id, api_key_id, tags_sha256, bucket, tags, cost_nanos, tokens, tool_calls, retries,
    consume_count)
SELECT 'small-' || t, $1::timestamptz - make_interval(hours => h), 'p', 'w', 'a', 'm', '', '',
    sha256(convert_to('{}', 'UTF8')), 0, '{}', 1, 1, 0, 0, 1
FROM generate_series(1, $2::integer) t, generate_series(1, 5) h"""
_TABLES = ("budget.spend_rollups", "budget.ledger", "budget.runs")


@dataclass(frozen=True)
class Page:
    """One page of one group (page_size 1), after `after` (None: the first page)."""

    group: SpendGroupBy
    after: str | None = None
    model: str = ""  # a filter

    def query(self, window: tuple[datetime, datetime]) -> SpendQuery:
        return SpendQuery(*window, self.group, SpendFilter(model=self.model))

    def name(self) -> str:
        return f"{self.group.value} after {self.after} model {self.model or '*'}"


def pages_of(base: datetime) -> list[Page]:
    middle_hour = (base - timedelta(hours=HOURS // 2)).strftime("%Y-%m-%dT%H:00:00Z")
    middle_day = (base - timedelta(days=HOURS // 48)).strftime("%Y-%m-%dT00:00:00Z")
    middles = {
        SpendGroupBy.HOUR: middle_hour,
        SpendGroupBy.DAY: middle_day,
        SpendGroupBy.PROJECT: "project-3",
        SpendGroupBy.WORKFLOW: "workflow-2",
        SpendGroupBy.AGENT: "agent-5",
        SpendGroupBy.MODEL: "model-09",
        SpendGroupBy.END_USER: "end-user-6",
        SpendGroupBy.API_KEY: "key-1",
    }
    found = [Page(group, after) for group, key in middles.items() for after in (None, key)]
    return [
        *found,
        Page(SpendGroupBy.HOUR, middle_hour, model="model-07"),  # walks model's index
        Page(SpendGroupBy.DAY, None, model="model-07"),
        Page(SpendGroupBy.MODEL, None, model="model-07"),
    ]


def literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return quote_literal(value.isoformat())
    if isinstance(value, int):
        return str(value)
    return quote_literal(str(value))


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found += nodes(child)
    return found


@dataclass(frozen=True)
class Cost:
    rollup_rows: int  # rows of budget.spend_rollups returned or thrown away, every loop
    ledger_rows: int
    run_rows: int
    buffers: int  # shared pages hit or read
    kinds: frozenset[str]  # node types over budget.spend_rollups


def cost(plan: Any) -> Cost:
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    rows = {"spend_rollups": 0, "ledger": 0, "runs": 0}
    kinds = set()
    for node in nodes(top):
        table = node.get("Relation Name")
        if table not in rows:
            continue
        loops = node.get("Actual Loops", 1)
        thrown = sum(node.get(f"Rows Removed by {what}", 0) for what in ("Filter", "Index Recheck"))
        rows[table] += round((node.get("Actual Rows", 0) + thrown) * loops)
        if table == "spend_rollups":
            kinds.add(node["Node Type"])
    buffers = int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])
    return Cost(rows["spend_rollups"], rows["ledger"], rows["runs"], buffers, frozenset(kinds))


class Reports:
    """The store's report statements, prepared on the application role's session (the plans a
    server keeps: generic ones under force_generic_plan), explained by page."""

    def __init__(self, app: asyncpg.Connection, window: tuple[datetime, datetime]) -> None:
        self.app = app
        self.window = window
        self.names: dict[str, str] = {}

    def prepared(self, page: Page) -> str:
        sql = report_sql(page.group, page.query(self.window).filter)
        return self.names.setdefault(sql, f"report_{len(self.names)}")

    async def prepare(self, pages: list[Page]) -> None:
        for page in pages:
            sql = report_sql(page.group, page.query(self.window).filter)
            if sql not in self.names:
                await self.app.execute(f"PREPARE {self.prepared(page)} AS {sql}")

    async def explain(self, page: Page) -> tuple[Cost, list[str]]:
        """The page's cost and its keys (a last one beyond the page: more follow)."""
        args = report_args(BIG, page.query(self.window), page.after, 1)
        call = f"EXECUTE {self.prepared(page)}({', '.join(literal(a) for a in args)})"
        plan = await self.app.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {call}")
        keys = [r["key"] for r in await self.app.fetch(call)]
        return cost(plan), keys


async def group_rows(owner: asyncpg.Connection, page: Page, key: str, window: Any) -> int:
    """The rollup rows of the page's group `key` in the window's whole hours (of its model
    filter, if any): what its page must read."""
    (start, end), _, _ = split_window(*window)
    if page.group.is_time:
        step = timedelta(hours=1) if page.group is SpendGroupBy.HOUR else timedelta(days=1)
        start, end = max(start, bucket_start(key)), min(end, bucket_start(key) + step)
        key, column = "", "''"  # no condition on an owner
    else:
        column = COLUMNS[page.group]
    count = (
        "SELECT count(*) FROM budget.spend_rollups WHERE tenant_id = $1 AND hour >= $2"
        f" AND hour < $3 AND {column} = $4 AND ($5 = '' OR model = $5)"
    )
    return int(await owner.fetchval(count, BIG, start, end, key, page.model))


# Beyond the page's own rows: a probe (a row or two) per key walked, the retired keys a first
# page passes and the next page's first key; pages for the walk's index and the ledger's.
WALK_ROWS, WALK_PAGES = 40, 400


async def check(owner: asyncpg.Connection, reports: Reports, pages: list[Page], when: str) -> None:
    """Each page reads its own group's rows and a few more, a small part of the tenant's,
    and the consume rows of the window's partial hours (none of the tenant's other ledger
    rows or runs)."""
    wrong, seen = [], []
    for page in pages:
        found, keys = await reports.explain(page)
        assert keys, (when, page.name())
        own = await group_rows(owner, page, keys[0], reports.window)
        assert own <= ROWS // 20, (page.name(), own)  # a page of one group is a small part
        seen.append(f"{page.name()}: own {own}, {found}")
        if found.rollup_rows > own + WALK_ROWS or found.buffers > own + WALK_PAGES:
            wrong.append(seen[-1])
        if found.ledger_rows > 2 * PARTIAL or found.run_rows > 2 * PARTIAL:
            wrong.append(seen[-1])
    assert not wrong, (when, wrong, seen)


async def test_a_report_page_reads_its_own_groups_not_the_window(
    app_database_url: str, database_url: str
) -> None:
    owner = await asyncpg.connect(database_url)  # the superuser: row-level security aside
    app = await asyncpg.connect(database_url)
    try:
        for table in _TABLES:
            await owner.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        await app.execute(f'SET ROLE "{urlsplit(app_database_url).username}"')
        await app.execute("SELECT set_config('ration.tenant_id', $1, false)", BIG)
        base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        window = (base - timedelta(days=365) + timedelta(minutes=20), base + timedelta(minutes=80))
        pages = pages_of(base)
        reports = Reports(app, window)
        # Plans made on empty tables and kept (nothing invalidates them) while the tenant grows.
        await app.execute("SET plan_cache_mode = force_generic_plan")
        await reports.prepare(pages)
        for page in pages:
            await app.fetch(
                f"EXECUTE {reports.prepared(page)}("
                + ", ".join(literal(a) for a in report_args(BIG, page.query(window), None, 1))
                + ")"
            )
        await owner.execute(_ROLLUPS, BIG, base, MODELS, ROWS)
        await owner.execute(_RETIRED, BIG, base, RETIRED)
        await owner.execute(_RUNS, BIG, RUNS)
        await owner.execute(_GRANTS, BIG, base, RUNS, GRANTS)
        _, head, tail = split_window(*window)
        for partial in (head, tail):
            await owner.execute(_CONSUMES, BIG, partial[0] + timedelta(minutes=5), PARTIAL)
        await check(owner, reports, pages, "generic, not analyzed")
        await app.execute("SET plan_cache_mode = force_custom_plan")
        await check(owner, reports, pages, "custom, not analyzed")
        await owner.execute(_SMALL, base, SMALL_TENANTS)
        await owner.execute("ANALYZE " + ", ".join(_TABLES))
        await app.execute("SET plan_cache_mode = force_generic_plan")
        await check(owner, reports, pages, "generic, analyzed")
        await app.execute("SET plan_cache_mode = force_custom_plan")
        await check(owner, reports, pages, "custom, analyzed")
    finally:
        await app.close()
        await owner.close()
