"""Every RPC of both services on Citus touches one tenant's shard only, and works with a
worker that holds none of the tenant's shards down.

Runs when RATION_TEST_CITUS_URL names a Citus coordinator (see tests/system/test_citus.py);
skipped with a one-line reason otherwise. Single-shard is read on the workers, not inferred:
`pg_stat_statements` there (tests/support/citus_shards.py) shows every statement each call
sent, two-phase commits and intermediate-result broadcasts included, which the coordinator's
`citus.multi_task_query_log_level` guard (on here too) cannot see. Needs pg_stat_statements in
the workers' shared_preload_libraries (skipped with the reason otherwise). The worker-down test
stops the worker with RATION_TEST_CITUS_WORKER_CTL when set, else closes the test database on
it to every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from ration_client import Amounts, BudgetClient, BudgetPolicy
from servicekit.auth import DEV_TENANT
from tests.support import citus
from tests.support.citus_budget import every_budget_rpc
from tests.support.citus_memory import SERVICE_ENV, exercise_memory, write_token_file
from tests.support.citus_shards import (
    StatementWatch,
    placement,
    prepare_statements,
    statements_unseen,
    tenants_on,
    worker_down,
)
from tests.support.citus_stack import Stack, fetch, running_stack, serve
from tests.support.procs import Proc

REASON = citus.skip_reason()
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack(prepare_statements) as running:
        unseen = asyncio.run(statements_unseen(running.database))
        if unseen:
            pytest.skip(unseen)
        yield running


def _memory(stack: Stack, tmp_path: Path, tenants: list[str]) -> Proc:
    """A memory service whose admin tokens `<tenant>-admin` belong to `tenants`."""
    tokens = write_token_file(tmp_path / "tokens.json", {f"{t}-admin": t for t in tenants})
    return serve(stack.database, ["memory", "serve"], RATION_TOKEN_FILE=str(tokens), **SERVICE_ENV)


async def test_every_budget_rpc_touches_only_its_tenants_shard(stack: Stack) -> None:
    home = await placement(stack.database, DEV_TENANT)
    watch = StatementWatch(stack.database)
    strays: dict[str, list[str]] = {}

    async def checkpoint(name: str) -> None:
        if found := await watch.strays([home]):
            strays[name] = found
        await watch.reset()

    await watch.reset()
    await every_budget_rpc(stack.budget, checkpoint)
    assert strays == {}, "\n".join(f"{rpc}: {q}" for rpc, qs in strays.items() for q in qs)
    # The check bites: a statement that scans every shard (let through the guard) is seen.
    app = await asyncpg.connect(stack.database.app_url)
    try:
        async with app.transaction():
            await app.execute(f"SET LOCAL ration.tenant_id = '{DEV_TENANT}'")
            await app.execute("SET LOCAL citus.multi_task_query_log_level = 'off'")
            await app.fetchval("SELECT count(*) FROM budget.runs")
    finally:
        await app.close()
    assert len(await watch.strays([home])) >= 2


async def test_every_memory_rpc_touches_only_its_tenants_shards(
    stack: Stack, tmp_path: Path
) -> None:
    node = (await placement(stack.database, DEV_TENANT)).node
    tenants = await tenants_on(stack.database, node, 2)
    homes = [await placement(stack.database, t) for t in tenants]
    memory = _memory(stack, tmp_path, tenants)
    watch = StatementWatch(stack.database)
    try:
        await watch.reset()
        await exercise_memory(memory.addresses["memory"], *(f"{t}-admin" for t in tenants))
        assert await watch.strays(homes) == []
    finally:
        memory.stop()


async def test_the_sweeper_expires_a_tenants_hold_on_its_shard_only(stack: Stack) -> None:
    """Background work: the sweeper's cross-tenant scans run as the owner (upkeep functions,
    by design on every shard); what it does as the application role, expiring a tenant's
    holds, touches that tenant's shard only."""
    home = await placement(stack.database, DEV_TENANT)
    async with BudgetClient(stack.budget) as budget:
        await budget.open_run("swept", project_id="p", policy=BudgetPolicy(max_tokens=100))
        await budget.reserve("swept", model="m", estimate=Amounts(tokens=10), ttl_seconds=1)
    watch = StatementWatch(stack.database)
    await watch.reset()
    sweeper = serve(stack.database, ["budget", "serve"], RATION_SWEEP_INTERVAL_MS="200")
    try:
        deadline = time.monotonic() + 30
        while True:
            rows = await fetch(
                stack.database.admin_url, "SELECT state FROM budget.holds WHERE run_id = 'swept'"
            )
            if [r["state"] for r in rows] == ["expired"]:
                break
            assert time.monotonic() < deadline, rows
            await asyncio.sleep(0.2)
        assert await watch.strays([home]) == []
    finally:
        with contextlib.suppress(Exception):
            sweeper.stop()
    log = "".join(sweeper.errors)
    assert "failed" not in log, log[-3000:]


async def test_every_rpc_works_with_a_worker_holding_none_of_the_tenants_shards_down(
    stack: Stack, tmp_path: Path
) -> None:
    home = await placement(stack.database, DEV_TENANT)
    tenants = await tenants_on(stack.database, home.node, 2)
    others = [w for w in stack.database.workers if w != home.node]
    assert others, "the cluster needs two workers"
    memory = _memory(stack, tmp_path, tenants)
    called: list[str] = []

    async def checkpoint(name: str) -> None:
        called.append(name)

    try:
        async with worker_down(stack.database, others[0]) as how:
            await every_budget_rpc(stack.budget, checkpoint)
            await exercise_memory(memory.addresses["memory"], *(f"{t}-admin" for t in tenants))
    finally:
        memory.stop()
    assert how in ("stopped", "closed to connections")
    assert "CloseRun" in called
    assert "ResumeRun" in called
