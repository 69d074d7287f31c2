"""The budget schema: tenant-led keys and indexes, an append-only ledger, request-log retention."""

from __future__ import annotations

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from budget_service.adapters.metrics import BudgetMetrics
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.sweeper import Sweeper
from budget_service.usecases.transactions import Transactions
from servicekit.db import Database
from servicekit.settings import Env

# Indexes of the owner's cross-tenant upkeep only (never read by a tenant's call), by design.
UPKEEP_INDEXES = {"holds_upkeep_by_expiry": "expires_at"}


async def test_tenant_id_leads_every_primary_key_and_index(db: asyncpg.Connection) -> None:
    rows = await db.fetch(
        """
        SELECT c.relname AS index, a.attname AS first_column
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE n.nspname = 'budget'
        """
    )
    assert len(rows) >= 9
    assert {r["index"]: r["first_column"] for r in rows} == {
        r["index"]: UPKEEP_INDEXES.get(r["index"], "tenant_id") for r in rows
    }
    tables = await db.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'budget'"
    )
    for table in tables:
        columns = await db.fetch(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'budget' AND table_name = $1",
            table["table_name"],
        )
        assert "tenant_id" in {c["column_name"] for c in columns}, table["table_name"]


async def test_the_ledger_is_append_only(db: asyncpg.Connection) -> None:
    await db.execute(
        "INSERT INTO budget.ledger (tenant_id, run_id, decision, policy_version)"
        " VALUES ('t', 'r', 'open', 1)"
    )
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await db.execute("UPDATE budget.ledger SET reason = 'x'")
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await db.execute("DELETE FROM budget.ledger")


async def test_the_sweeper_forgets_old_requests_and_stale_watchers_only(
    database_url: str, db: asyncpg.Connection
) -> None:
    for tenant, request_id, age in [("a", "old", 25), ("b", "old", 30), ("a", "new", 23)]:
        await db.execute(
            "INSERT INTO budget.request_log (tenant_id, request_id, fingerprint, response,"
            " created_at) VALUES ($1, $2, '', '', now() - make_interval(hours => $3))",
            tenant,
            request_id,
            age,
        )
    for hub, age in [("gone", 3600), ("alive", 5)]:  # a killed process's watcher rows
        await db.execute(
            "INSERT INTO budget.watchers (tenant_id, run_id, hub_id, seen_at)"
            " VALUES ('a', 'r', $1, now() - make_interval(secs => $2))",
            hub,
            age,
        )
    env = Env({"RATION_DATABASE_URL": database_url, "RATION_BUDGET_METRICS_LISTEN": "off"})
    settings = BudgetSettings.from_env(env)
    database = Database(database_url, settings.database)
    await database.connect()
    try:
        metrics = BudgetMetrics(CollectorRegistry())
        await Sweeper(Transactions(database, settings, metrics)).sweep()
    finally:
        await database.close()
    left = await db.fetch("SELECT tenant_id, request_id FROM budget.request_log")
    assert [(r["tenant_id"], r["request_id"]) for r in left] == [("a", "new")]
    assert await db.fetchval("SELECT array_agg(hub_id) FROM budget.watchers") == ["alive"]
