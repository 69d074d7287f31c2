"""Where a tenant's shards live on a Citus cluster, which statements reached the workers, and a
worker taken down: for the Citus system tests' single-shard and worker-down checks.

Which statements reached a worker is read from `pg_stat_statements` on each worker (superuser),
for the test database and the application role: it records every statement the coordinator
sends, the delegated function calls, two-phase commits (`PREPARE TRANSACTION`) and
intermediate results (`COPY … WITH (format result)`) included, synchronously at the
statement's end, so a check right after a call sees all of that call. A call of tenant T is
single-shard when no other worker saw a statement of it and every shard its worker saw named
is one of T's co-located shards."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.support import citus
from tests.support.citus_stack import fetch

# A command that stops or starts a worker, `{action}` (stop, start) and `{port}` filled in,
# e.g. "/work/citus-cluster/cluster.sh {action}-node {port}". Without it a worker is "down"
# for the test database only: new connections refused, existing ones ended.
WORKER_CTL_VARIABLE = "RATION_TEST_CITUS_WORKER_CTL"

SHARD_NAME = re.compile(r"\b(?:budget|memory)\.[a-z_]+_(\d+)\b")
# What a single-node transaction never sends: two-phase commit. (An intermediate result on the
# tenant's own worker is allowed: Citus plans `INSERT … SELECT … FROM unnest(…)` that way even
# in a delegated function, on that worker alone; one sent to another worker is caught there.)
BROADCAST = re.compile(r"PREPARE TRANSACTION|COMMIT PREPARED", re.I)

_PRELOADED = "SELECT current_setting('shared_preload_libraries') ~ 'pg_stat_statements'"
_GROUP_SHARDS = """
SELECT get_shard_id_for_distribution_column(p.logicalrelid, $1::text) AS shard
FROM pg_dist_partition p
WHERE p.colocationid = (SELECT colocationid FROM pg_dist_partition
                        WHERE logicalrelid = 'budget.runs'::regclass)"""
_SHARD_NODE = """
SELECT n.nodename, n.nodeport FROM pg_dist_placement pl JOIN pg_dist_node n USING (groupid)
WHERE pl.shardid = $1"""
_STATEMENTS = """
SELECT s.query FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND r.rolname = $1"""


@dataclass(frozen=True)
class Placement:
    tenant: str
    shards: frozenset[int]
    node: citus.Node


async def placement(database: citus.CitusDatabase, tenant: str) -> Placement:
    """The tenant's shard of every co-located table, and the worker that holds them."""
    shards = frozenset(r["shard"] for r in await fetch(database.admin_url, _GROUP_SHARDS, tenant))
    nodes = {
        citus.Node(r["nodename"], r["nodeport"])
        for shard in shards
        for r in await fetch(database.admin_url, _SHARD_NODE, shard)
    }
    assert len(nodes) == 1, (tenant, nodes)  # co-located: one worker holds them all
    return Placement(tenant, shards, nodes.pop())


async def tenants_on(database: citus.CitusDatabase, node: citus.Node, count: int) -> list[str]:
    """`count` tenant names whose shards the worker holds (tried in order: t0, t1, …)."""
    found: list[str] = []
    for i in range(1000):
        if (await placement(database, f"t{i}")).node == node:
            found.append(f"t{i}")
            if len(found) == count:
                return found
    raise AssertionError(f"no {count} tenants on {node}")


def prepare_statements(database: str) -> list[str]:
    """Superuser statements for each worker's copy of the database (before the services)."""
    return [
        "SET citus.enable_ddl_propagation = off",
        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
        f"ALTER DATABASE \"{database}\" SET pg_stat_statements.track = 'all'",
    ]


async def statements_unseen(database: citus.CitusDatabase) -> str | None:
    """Why the workers' statements cannot be read (one line), or None."""
    for node in database.workers:
        rows = await fetch(database.node_url(node, database.name), _PRELOADED)
        if not rows[0][0]:
            return f"pg_stat_statements is not in shared_preload_libraries on {node.port}"
    return None


class StatementWatch:
    """The application role's statements on every worker since the last `reset`."""

    def __init__(self, database: citus.CitusDatabase) -> None:
        self.database = database

    async def reset(self) -> None:
        for node in self.database.workers:
            url = self.database.node_url(node, self.database.name)
            await fetch(url, "SELECT pg_stat_statements_reset()")

    async def strays(self, allowed: Sequence[Placement]) -> list[str]:
        """Statements since the reset that touched more than the allowed tenants' shards."""
        shards = frozenset().union(*(p.shards for p in allowed))
        nodes = {p.node for p in allowed}
        found: list[str] = []
        for node in self.database.workers:
            url = self.database.node_url(node, self.database.name)
            for row in await fetch(url, _STATEMENTS, self.database.app):
                query = " ".join(row["query"].split())
                named = {int(s) for s in SHARD_NAME.findall(query)}
                if node not in nodes or BROADCAST.search(query) or named - shards:
                    found.append(f"{node.port}: {query[:1500]}")
        return found


async def _control(ctl: str, action: str, node: citus.Node) -> None:
    argv = shlex.split(ctl.format(action=action, port=node.port))
    await asyncio.to_thread(subprocess.run, argv, check=True, timeout=120)


@asynccontextmanager
async def worker_down(database: citus.CitusDatabase, node: citus.Node) -> AsyncIterator[str]:
    """The worker stopped (WORKER_CTL_VARIABLE) or, without that command, the test database on
    it closed to every connection; yields how. Restored afterwards."""
    ctl = os.environ.get(WORKER_CTL_VARIABLE)
    if ctl:
        await _control(ctl, "stop", node)
        try:
            yield "stopped"
        finally:
            await _control(ctl, "start", node)
        return
    maintenance = database.node_url(node, urlsplit(os.environ[citus.URL_VARIABLE]).path.lstrip("/"))
    name = database.name
    await citus.execute(
        maintenance,
        f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()",
    )
    try:
        yield "closed to connections"
    finally:
        await citus.execute(maintenance, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
