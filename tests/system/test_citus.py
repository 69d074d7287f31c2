"""ration on a live Citus cluster, set up as deploy/README.md's Citus section says.

Runs when RATION_TEST_CITUS_URL is a superuser URL of a Citus coordinator database (with its
workers added); skipped with a one-line reason otherwise (also when that URL is plain
PostgreSQL). The module makes its own database on every node and its own roles
(tests/support/citus.py), then: `ration migrate --distribute` as the owner (twice: idempotent),
both services as the application role, and against them the README tour, a race of two budget
replicas on one run, WatchRunEvents live while the writes happen on the workers, the memory
calls, and hold expiry by the sweeper. Every statement the services send as the application
role while these run must be single-shard: the role runs with
`citus.multi_task_query_log_level = 'error'` (tests/support/citus_stack.py; the cross-tenant
upkeep functions are exempt, they fan out by design), so a statement that would fan out to
several shards fails its call and is logged (the test reads the log), and a control query shows
the setting bites. tests/system/test_citus_shards.py checks on the workers what this cannot see.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetHeld,
    BudgetPolicy,
)
from tests.api.test_readme_tour import run_block, tour_code
from tests.support import citus
from tests.support.citus_memory import SERVICE_ENV, exercise_memory, write_token_file
from tests.support.citus_stack import Stack, fetch, ration, running_stack, serve

REASON = citus.skip_reason()
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack() as running:
        yield running


def test_migrate_distribute_puts_every_tenant_table_on_one_colocated_shard_set(
    stack: Stack,
) -> None:
    assert any(
        line.startswith("distributed budget.runs by tenant_id") for line in stack.migrate_output
    )
    assert any("delegated budget.decide_v1(" in line for line in stack.migrate_output)
    assert any("delegated budget.decide_v2(" in line for line in stack.migrate_output)
    assert any("delegated budget.decide_v3(" in line for line in stack.migrate_output)
    name, app = stack.database.name, stack.database.app
    for setting in (
        "citus.propagate_set_commands = 'local'",
        "citus.override_table_visibility = 'off'",
    ):
        assert f"set {setting} on database {name}" in stack.migrate_output
    grants = [line for line in stack.migrate_output if line.startswith("granted ")]
    assert f"granted USAGE on schema budget to {app}" in grants, stack.migrate_output
    # The README step is idempotent: a second run distributes and sets nothing again; it
    # issues the schemas' grants again (a line each) and says so.
    again = ration(["migrate", "--distribute"], stack.database.owner_url)
    assert again == ["migrations: up to date", *grants, "citus: everything distributed"]

    tables = asyncio.run(
        fetch(
            stack.database.admin_url,
            """SELECT c.oid::regclass::text AS name, d.colocationid, d.partmethod::text,
                      column_to_column_name(d.logicalrelid, d.partkey) AS key
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               LEFT JOIN pg_dist_partition d ON d.logicalrelid = c.oid
               WHERE n.nspname IN ('budget', 'memory') AND c.relkind = 'r'""",
        )
    )
    assert len(tables) >= 15
    assert {t["partmethod"] for t in tables} == {"h"}, tables
    assert {t["key"] for t in tables} == {"tenant_id"}, tables
    assert len({t["colocationid"] for t in tables}) == 1, tables
    local = asyncio.run(
        fetch(
            stack.database.admin_url,
            "SELECT count(*) AS n FROM pg_dist_partition"
            " WHERE logicalrelid = 'public.ration_migrations'::regclass",
        )
    )
    assert local[0]["n"] == 0  # the migrations ledger stays on the coordinator
    delegated = asyncio.run(
        fetch(
            stack.database.admin_url,
            "SELECT o.objid::regprocedure::text AS f, o.force_delegation"
            " FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass"
            " AND o.distribution_argument_index IS NOT NULL",
        )
    )
    names = {d["f"].split("(")[0] for d in delegated}
    assert {"budget.decide_v1", "budget.decide_v2", "budget.decide_v3"} <= names
    # The engine and its steps run inside the delegated call, on the tenant's worker.
    assert not {"budget.decide_batch_v2", "budget.decide_batch_v3"} & names
    assert all(d["force_delegation"] for d in delegated)


async def test_the_readme_tour_runs_on_citus(stack: Stack) -> None:
    budget_port = int(stack.budget.rsplit(":", 1)[1])
    memory_port = int(stack.memory.rsplit(":", 1)[1])
    text = await run_block(tour_code(), budget=budget_port, memory=memory_port)
    assert "[REDACTED:booking_key]" in text
    assert "sk-live-1234567890abcdef" not in text
    assert "budget.reserved" in text
    assert "budget.consumed" in text


async def test_two_budget_replicas_racing_on_one_run_never_overspend(stack: Stack) -> None:
    second = serve(stack.database, ["budget", "serve"])
    try:
        limit, each, calls = 10_000, 300, 80  # room for 33 calls of 80
        clients = [BudgetClient(stack.budget), BudgetClient(second.addresses["budget"])]
        try:
            await clients[0].open_run("race", project_id="p", policy=BudgetPolicy(max_tokens=limit))
            granted = 0
            refused = 0

            async def one(i: int) -> None:
                nonlocal granted, refused
                client = clients[i % 2]
                for _ in range(20):  # BUDGET_HELD is retryable: holds of others settle
                    try:
                        async with client.call(
                            "race", model="m", estimate=Amounts(tokens=each)
                        ) as hold:
                            await hold.consume(Amounts(tokens=each))
                        granted += 1
                        return
                    except BudgetHeld:
                        await asyncio.sleep(0.05)
                    except BudgetExhausted:
                        refused += 1
                        return
                refused += 1

            await asyncio.gather(*(one(i) for i in range(calls)))
            run = await clients[1].get_run("race")
        finally:
            for client in clients:
                await client.close()
    finally:
        second.stop()
    tokens = next(s for s in run.dimensions if s.dimension.value == "tokens")
    assert tokens.consumed == granted * each <= limit
    assert granted == limit // each  # exact: every call that fits was granted
    assert refused == calls - granted
    assert tokens.held == 0


async def test_watch_run_events_live_while_workers_write(stack: Stack) -> None:
    async with BudgetClient(stack.budget) as budget:
        await budget.open_run(
            "watched", project_id="p", policy=BudgetPolicy(max_tokens=1_000, threshold_percent=50)
        )
        seen: list[str] = []

        async def follow() -> None:
            async for event in budget.watch("watched"):
                seen.append(event.type)
                if event.type == "budget.threshold.crossed":
                    return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)  # the stream is open and has read the run's first event
        async with BudgetClient(stack.budget) as writer:
            for _ in range(3):
                async with writer.call("watched", model="m", estimate=Amounts(tokens=200)) as hold:
                    await hold.consume(Amounts(tokens=200))
        await asyncio.wait_for(follower, timeout=15)
    assert seen[0] == "budget.reserved"
    assert seen.count("budget.consumed") >= 2
    assert seen[-1] == "budget.threshold.crossed"


async def test_memory_calls_on_citus(stack: Stack, tmp_path: Path) -> None:
    """Every memory RPC, replays and concurrent writers included, for two tenants (tokens)."""
    tokens = write_token_file(tmp_path / "tokens.json")
    memory = serve(
        stack.database, ["memory", "serve"], RATION_TOKEN_FILE=str(tokens), **SERVICE_ENV
    )
    try:
        await exercise_memory(memory.addresses["memory"], "alpha-admin", "beta-admin")
    finally:
        memory.stop()


async def test_every_statement_of_the_services_is_single_shard(stack: Stack) -> None:
    """Ran after the calls above (the module's order): none of them failed on the setting, and
    the setting does fail a statement that fans out, so the check is real."""
    app = await asyncpg.connect(stack.database.app_url)
    try:
        async with app.transaction():
            await app.execute("SET LOCAL ration.tenant_id = 'dev'")
            with pytest.raises(asyncpg.PostgresError, match="multi-task"):
                await app.fetchval("SELECT count(*) FROM budget.runs")
        async with app.transaction():
            await app.execute("SET LOCAL ration.tenant_id = 'dev'")
            plan = await app.fetch(
                "EXPLAIN SELECT * FROM budget.decide_v1('dev', false, true, ARRAY['check'],"
                " ARRAY[''], ARRAY[''::bytea], ARRAY['race'], ARRAY[''], ARRAY['m'],"
                " ARRAY[1]::bigint[], ARRAY[0]::bigint[], ARRAY[0]::bigint[],"
                " ARRAY[0]::bigint[], ARRAY[false], ARRAY[0])"
            )
            plan_v2 = await app.fetch(
                "EXPLAIN SELECT * FROM budget.decide_v2('dev', false, true, ARRAY[ROW('check',"
                " '', ''::bytea, 'race', '', 'm', 1, 0, 0, 0, false, 0)::budget.decide_item_v2])"
            )
    finally:
        await app.close()
    for explained in (plan, plan_v2):
        text = "\n".join(r[0] for r in explained)
        assert "Task Count: 1" in text, text
    log = "".join(stack.services.errors)
    assert "multi-task" not in log, log[-3000:]
    assert "failed" not in log, log[-3000:]  # background work included (the sweeper's start)


async def test_the_sweeper_expires_overdue_holds_on_citus(stack: Stack) -> None:
    async with BudgetClient(stack.budget) as budget:
        await budget.open_run("late", project_id="p", policy=BudgetPolicy(max_tokens=100))
        await budget.reserve("late", model="m", estimate=Amounts(tokens=10), ttl_seconds=1)
    # A replica with a short sweep interval: its cross-tenant scans run inside the upkeep
    # functions (exempt from the guard), each run's expiry as its tenant (guarded).
    sweeper = serve(stack.database, ["budget", "serve"], RATION_SWEEP_INTERVAL_MS="200")
    try:
        deadline = time.monotonic() + 30
        while True:
            states = await fetch(
                stack.database.admin_url,
                "SELECT state FROM budget.holds WHERE run_id = 'late'",
            )
            if [s["state"] for s in states] == ["expired"]:
                break
            assert time.monotonic() < deadline, states
            await asyncio.sleep(0.2)
    finally:
        with contextlib.suppress(Exception):
            sweeper.stop()
    log = "".join(sweeper.errors)
    assert "failed" not in log, log[-3000:]


async def test_row_level_security_holds_on_the_workers(stack: Stack) -> None:
    """The second line of tenant isolation: a statement that names no tenant (here one that
    scans every shard, let through the guard) sees only the
    tenant its transaction entered, on every worker."""
    scan_all = "SET LOCAL citus.multi_task_query_log_level = 'off'"
    app = await asyncpg.connect(stack.database.app_url)
    try:
        async with app.transaction():
            await app.execute("SET LOCAL ration.tenant_id = 'alpha'")
            await app.execute(scan_all)
            tenants = await app.fetch("SELECT DISTINCT tenant_id FROM memory.memories")
        async with app.transaction():
            await app.execute("SET LOCAL ration.tenant_id = 'nobody'")
            await app.execute(scan_all)
            nothing = await app.fetchval("SELECT count(*) FROM memory.memories")
    finally:
        await app.close()
    everything = await fetch(
        stack.database.admin_url, "SELECT DISTINCT tenant_id FROM memory.memories"
    )
    assert {r["tenant_id"] for r in everything} >= {"alpha", "beta"}  # both wrote memories
    assert [r["tenant_id"] for r in tenants] == ["alpha"]
    assert nothing == 0
