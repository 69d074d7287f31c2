"""Row-level security as a real second line (DESIGN 5): forced on every tenant table of both
schemas, applied to the role the services connect as, so a read without the application's
tenant filter still sees one tenant's rows; cross-tenant upkeep only through its functions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from prometheus_client import CollectorRegistry

from budget_service.adapters.metrics import BudgetMetrics
from budget_service.domain.policy import Dimension
from budget_service.store import reads as store_reads
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.sweeper import Sweeper
from budget_service.usecases.transactions import Transactions
from memory_service.definition import MIGRATIONS as MEMORY
from ration.budget.v1 import budget_pb2 as pb
from ration_server import registry
from servicekit.db import Database, enter_tenant
from servicekit.dbrole import privilege_problem
from servicekit.migrations import MigrationDrift, migrate, pending
from servicekit.settings import Env
from tests.support import dbroles
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.memory import Memory
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

TENANT_TABLES = """
SELECT n.nspname || '.' || c.relname AS name, c.relrowsecurity, c.relforcerowsecurity,
    EXISTS (SELECT 1 FROM pg_policies p
            WHERE p.schemaname = n.nspname AND p.tablename = c.relname
              AND p.policyname = 'tenant_isolation' AND p.roles = '{public}'
              AND p.qual LIKE '%current_setting(''ration.tenant_id''%'
              AND p.with_check LIKE '%current_setting(''ration.tenant_id''%') AS policed
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('budget', 'memory') AND c.relkind IN ('r', 'p')
  AND EXISTS (SELECT 1 FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
ORDER BY 1"""


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    rows = [(f"{t}-token", t, ["writer", "admin"]) for t in ("alpha", "beta")]
    return write_token_file(tmp_path / "tokens.json", *rows)


async def as_tenant(url: str, tenant: str | None, sql: str, *args: Any) -> list[asyncpg.Record]:
    """A raw query with no tenant filter of its own, in a transaction scoped to `tenant` the
    way the services scope theirs (servicekit/db.py enter_tenant), or to no tenant."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(enter_tenant(tenant) if tenant is not None else "BEGIN")
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()


@pytest.fixture
async def budget_pair(
    start_server: StartServer, token_file: Path
) -> AsyncIterator[tuple[Budget, Budget]]:
    # The server's own sweeper sweeps once at start, then not during a test.
    runner = await start_server(
        "budget", RATION_TOKEN_FILE=str(token_file), RATION_SWEEP_INTERVAL_MS="3600000"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield Budget(channel, bearer("alpha-token")), Budget(channel, bearer("beta-token"))


async def test_every_tenant_table_of_both_schemas_has_row_level_security_forced(
    db: asyncpg.Connection,
) -> None:
    tables = await db.fetch(TENANT_TABLES)
    names = [t["name"] for t in tables]
    assert {"budget.runs", "budget.holds", "budget.ledger", "budget.watchers"} <= set(names)
    assert {"memory.memories", "memory.entry_versions", "memory.request_log"} <= set(names)
    assert [t["name"] for t in tables if not t["relrowsecurity"]] == []
    assert [t["name"] for t in tables if not t["relforcerowsecurity"]] == []
    assert [t["name"] for t in tables if not t["policed"]] == []


async def test_a_budget_read_without_the_app_filter_sees_only_the_callers_rows(
    budget_pair: tuple[Budget, Budget], db: asyncpg.Connection, app_database_url: str
) -> None:
    alpha, beta = budget_pair
    await alpha.open_run("run-a", max_tokens=1000)
    await beta.open_run("run-b", max_tokens=1000)
    await alpha.reserve("run-a", tokens=10)  # the one-round-trip Reserve, as alpha
    await beta.reserve("run-b", tokens=20)
    everything = "SELECT tenant_id, run_id, held_tokens FROM budget.runs ORDER BY run_id"
    assert len(await db.fetch(everything)) == 2  # the superuser control: both are there
    seen = await as_tenant(app_database_url, "alpha", everything)
    assert [tuple(r) for r in seen] == [("alpha", "run-a", 10)]
    reservations = await as_tenant(app_database_url, "beta", "SELECT tenant_id FROM budget.holds")
    assert [r["tenant_id"] for r in reservations] == ["beta"]
    assert await as_tenant(app_database_url, None, everything) == []  # no tenant: nothing


async def test_a_memory_read_without_the_app_filter_sees_only_the_callers_rows(
    start_server: StartServer,
    token_file: Path,
    db: asyncpg.Connection,
    app_database_url: str,
) -> None:
    runner = await start_server("memory", RATION_TOKEN_FILE=str(token_file))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        await Memory(channel, "notes", token="alpha-token").append("alpha's plan")
        await Memory(channel, "notes", token="beta-token").append("beta's plan")
    everything = "SELECT tenant_id, content FROM memory.entry_versions ORDER BY tenant_id"
    assert len(await db.fetch(everything)) == 2
    seen = await as_tenant(app_database_url, "alpha", everything)
    assert [tuple(r) for r in seen] == [("alpha", "alpha's plan")]
    assert await as_tenant(app_database_url, None, everything) == []


async def test_the_decision_function_enters_the_tenant_of_its_argument(
    budget_pair: tuple[Budget, Budget], app_database_url: str
) -> None:
    """budget.decide_v1 sets ration.tenant_id from its tenant argument, whatever the caller's
    transaction had entered, so its reads and writes are filtered by row-level security as
    that tenant: beta's Check of alpha's run finds nothing even inside alpha's transaction."""
    alpha, beta = budget_pair
    await alpha.open_run("run-a", max_tokens=1000)
    assert (await rpc_error(beta.check("run-a", tokens=5))).reason == "RUN_NOT_FOUND"
    assert (await alpha.check("run-a", tokens=5)).would_grant
    call = (
        "SELECT d.outcomes, current_setting('ration.tenant_id') AS entered FROM budget.decide_v1("
        "$1, false, true, ARRAY['check'], ARRAY[''], ARRAY[''::bytea], ARRAY['run-a'],"
        " ARRAY[''], ARRAY[''], ARRAY[5]::bigint[], ARRAY[0]::bigint[], ARRAY[0]::bigint[],"
        " ARRAY[0]::bigint[], ARRAY[false], ARRAY[0]) d"
    )
    for tenant, outcome in (("beta", "not_found"), ("alpha", "checked")):
        (row,) = await as_tenant(app_database_url, "alpha", call, tenant)
        assert (row["outcomes"], row["entered"]) == ([outcome], tenant)


async def test_writes_for_another_tenant_are_refused_by_the_policy(
    app_database_url: str,
) -> None:
    insert = (
        "INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response)"
        " VALUES ('beta', 'r1', '', '')"
    )
    with pytest.raises(asyncpg.exceptions.InsufficientPrivilegeError):
        await as_tenant(app_database_url, "alpha", insert)


async def test_forced_rls_filters_the_tables_owner_too(
    budget_pair: tuple[Budget, Budget], database_url: str, db_roles: dbroles.Roles
) -> None:
    alpha, beta = budget_pair
    await alpha.open_run("run-a")
    await beta.open_run("run-b")
    owner = db_roles.owner_url(database_url)
    seen = await as_tenant(owner, "beta", "SELECT run_id FROM budget.runs")
    assert [r["run_id"] for r in seen] == ["run-b"]


async def test_upkeep_crosses_tenants_only_through_its_functions(
    budget_pair: tuple[Budget, Budget], app_database_url: str
) -> None:
    alpha, beta = budget_pair
    for budget, run in ((alpha, "run-a"), (beta, "run-b")):
        await budget.open_run(run)
        await budget.reserve(run, tokens=5)
    counted = await as_tenant(app_database_url, None, "SELECT budget.open_hold_count() AS n")
    assert counted[0]["n"] == 2
    # The flag the upkeep policies look at does nothing for the application role itself.
    conn = await asyncpg.connect(app_database_url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL ration.upkeep = 'on'")
            assert await conn.fetchval("SELECT count(*) FROM budget.holds") == 0
    finally:
        await conn.close()


async def test_the_sweeper_expires_and_gauges_every_tenant_as_the_application_role(
    budget_pair: tuple[Budget, Budget], db: asyncpg.Connection, app_database_url: str
) -> None:
    for budget in budget_pair:
        await budget.put_scope(
            pb.SCOPE_PROJECT, "shared", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=100
        )
        await budget.open_run("run", project_id="shared")
        await budget.reserve("run", tokens=30)
    await db.execute("UPDATE budget.holds SET expires_at = now() - interval '1 second'")
    settings = BudgetSettings.from_env(Env({}))
    database = Database(app_database_url, settings.database)
    await database.connect()
    try:
        tx = Transactions(database, settings, BudgetMetrics(CollectorRegistry()))
        assert await Sweeper(tx).sweep() == 2  # both tenants' overdue holds, as the app role
        pools = await tx.upkeep(store_reads.all_pools)  # what the pool gauges are made of
    finally:
        await database.close()
    states = await db.fetch("SELECT tenant_id, state FROM budget.holds ORDER BY tenant_id")
    assert [tuple(r) for r in states] == [("alpha", "expired"), ("beta", "expired")]
    assert sorted(tenant for tenant, _ in pools) == ["alpha", "beta"]
    for _, pool in pools:
        assert pool.budget.scope_id == "shared"
        assert pool.balance.held[Dimension.TOKENS] == 0  # the expired holds let go of the pool


async def test_migrations_run_as_a_non_superuser_owner_on_a_fresh_database(
    empty_database_url: str, db_roles: dbroles.Roles
) -> None:
    app = await asyncpg.connect(db_roles.app_url(empty_database_url))
    try:  # what a service with RATION_MIGRATE_ON_START=false waits for, NOT_SERVING
        assert "budget/0005_row_level_security" in await pending(app, registry.all_migrations())
    finally:
        await app.close()
    owner = await asyncpg.connect(db_roles.owner_url(empty_database_url))
    try:
        assert not await owner.fetchval(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        )
        applied = await migrate(owner, registry.all_migrations())
        assert "budget/0005_row_level_security" in applied
        assert "memory/0005_forced_rls" in applied
        assert "owns the tables" in str(await privilege_problem(owner, ["budget", "memory"]))
    finally:
        await owner.close()
    app = await asyncpg.connect(db_roles.app_url(empty_database_url))
    try:
        assert await privilege_problem(app, ["budget", "memory"]) is None
        assert await migrate(app, registry.all_migrations()) == []  # nothing pending: only a check
    finally:
        await app.close()
    written = await as_tenant(
        db_roles.app_url(empty_database_url),
        "alpha",
        "INSERT INTO memory.request_log (tenant_id, request_id, fingerprint, response)"
        " VALUES ('alpha', 'r1', '', '') RETURNING tenant_id",
    )
    assert [r["tenant_id"] for r in written] == ["alpha"]


async def test_a_database_that_applied_the_first_text_of_memory_0003_stays_valid(
    db: asyncpg.Connection,
) -> None:
    (first_text,) = MEMORY.rewritten[3]
    await db.execute(
        "UPDATE public.ration_migrations SET checksum = $1"
        " WHERE schema_name = 'memory' AND version = 3",
        first_text,
    )
    assert (
        await migrate(db, registry.all_migrations()) == []
    )  # accepted: no drift, nothing to apply
    await db.execute(
        "UPDATE public.ration_migrations SET checksum = 'edited'"
        " WHERE schema_name = 'memory' AND version = 3"
    )
    with pytest.raises(MigrationDrift):
        await migrate(db, registry.all_migrations())


async def test_every_upkeep_function_is_security_definer_and_not_executable_by_public(
    db: asyncpg.Connection,
) -> None:
    rows = await db.fetch(
        "SELECT p.oid::regprocedure::text AS name,"
        " EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
        "         WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS public_execute"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname IN ('budget', 'memory') AND p.prosecdef"
    )
    names = sorted(r["name"].split("(")[0] for r in rows)
    assert names == [
        "budget.api_key_identities_v1",
        "budget.forget_watchers",
        "budget.open_hold_count",
        "budget.overdue_runs",
        "budget.pool_gauges",
        "budget.purge_request_log",
        "budget.purge_watchers",
        "budget.refresh_watchers",
        "budget.shard_fence_v1",  # not upkeep: Citus's shard lock is the owner's (issue 28)
        "memory.purge_request_log",
        "memory.shard_fence_v1",
    ]
    assert [r["name"] for r in rows if r["public_execute"]] == []
