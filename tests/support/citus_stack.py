"""The services on a fresh Citus database (tests/support/citus.py), for the Citus system tests:
`ration migrate --distribute` as the owner, the services as the application role with every
statement that fans out to several shards failing (`citus.multi_task_query_log_level`), except
inside the cross-tenant upkeep functions, which fan out by design (deploy/README.md)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import asyncpg

from tests.support import citus
from tests.support.procs import BIN, Proc, clean_env

# While the stack runs, the sweeper stays out of the way (its first sweep runs at start).
QUIET_SWEEP_MS = "3600000"

# The upkeep functions: SECURITY DEFINER and no tenant argument. They scan every shard.
_UPKEEP = """
SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname IN ('budget', 'memory') AND p.prosecdef
  AND NOT 'p_tenant' = ANY(coalesce(p.proargnames, '{}'))"""


@dataclass
class Stack:
    database: citus.CitusDatabase
    migrate_output: list[str]
    services: Proc

    @property
    def budget(self) -> str:
        return self.services.addresses["budget"]

    @property
    def memory(self) -> str:
        return self.services.addresses["memory"]


def ration(args: list[str], url: str) -> list[str]:
    done = subprocess.run(
        [str(BIN / "ration"), *args],
        env=clean_env(RATION_DATABASE_URL=url, RATION_LOG_LEVEL="WARNING"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def serve(database: citus.CitusDatabase, command: list[str], **env: str) -> Proc:
    proc = Proc.start(
        [str(BIN / "ration"), *command],
        clean_env(
            **{
                "RATION_DATABASE_URL": database.app_url,
                "RATION_MIGRATE_ON_START": "false",
                "RATION_SWEEP_INTERVAL_MS": QUIET_SWEEP_MS,
                **env,
            }
        ),
    )
    proc.wait_for("ready: all services SERVING", timeout=120)
    return proc


async def admin(database: citus.CitusDatabase, *statements: str) -> None:
    conn = await asyncpg.connect(database.admin_url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def fetch(url: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def _single_shard_only(database: citus.CitusDatabase) -> None:
    upkeep = await fetch(database.admin_url, _UPKEEP)
    await admin(
        database,
        f'ALTER ROLE "{database.app}" IN DATABASE "{database.name}"'
        " SET citus.multi_task_query_log_level = 'error'",
        *(f"ALTER FUNCTION {u[0]} SET citus.multi_task_query_log_level = 'off'" for u in upkeep),
    )


@contextmanager
def running_stack(prepare: Callable[[str], list[str]] | None = None) -> Iterator[Stack]:
    """A new database, distributed, the guard on, `ration up` serving; dropped afterwards.
    `prepare(name)`: superuser statements for each worker's copy of the database, run first."""
    database = asyncio.run(citus.create())
    try:
        for node in database.workers:
            statements = prepare(database.name) if prepare else []
            asyncio.run(citus.execute(database.node_url(node, database.name), *statements))
        output = ration(["migrate", "--distribute"], database.owner_url)
        asyncio.run(_single_shard_only(database))
        services = serve(database, ["up"])
        try:
            yield Stack(database, output, services)
        finally:
            services.stop()
    finally:
        asyncio.run(citus.drop(database))
