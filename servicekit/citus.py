"""Citus: distributing the services' schemas across a cluster, from its coordinator.

`ration migrate --distribute` runs this after the migrations (and `ration migrate` runs it again
by itself on a cluster where it ran once, so a later migration's new table or function is
distributed in the same step). Every step is idempotent and looks at the catalog, not at a list:

1. unlogged tables become logged (shard moves and tenant isolation replicate logically, which an
   unlogged table cannot join);
2. every table with a `tenant_id` column is distributed by it, all co-located (a tenant's rows of
   every table on one shard, so a call's transaction touches one shard); a table without one
   becomes a reference table; referenced tables go first, in foreign-key order;
3. the schemas' grants are issued again, so the workers' copies of the schemas carry them
   (Citus creates those copies without the default privileges that gave them on the
   coordinator): on every run, a line each; so are the EXECUTE grants of the functions PUBLIC
   may not execute (the SECURITY DEFINER ones: a delegated call runs budget.shard_fence_v1 on
   the worker as the application role), after step 4;
4. every function is distributed (created on every node); a function with a `p_tenant`
   argument is delegated by it (`force_delegation`): the coordinator sends the call to the
   worker holding that tenant's shard, inside the caller's transaction. A delegated function
   plans its statements per call (Citus routes a statement by its parameter values), so a
   `plan_cache_mode` it sets is reset;
5. the database sets `citus.propagate_set_commands = 'local'`, so a transaction's
   `SET LOCAL ration.tenant_id` (servicekit/db.py) reaches the workers it uses, and
   `citus.override_table_visibility = off` (see DATABASE_SETTINGS): a line for each setting
   that was not yet so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from servicekit.migrations import LOCK_KEY

# The argument by which a per-tenant function is delegated to its tenant's worker.
TENANT_ARGUMENT = "p_tenant"

# Set on the database (step 5). propagate_set_commands: the transaction's SET LOCAL of the
# tenant reaches the workers. override_table_visibility: Citus hides shards from catalog reads
# by a filter on every pg_class row, which made asyncpg's type lookup on each new connection
# take 0.5 s on a coordinator (4 ms without it); the services hide no shard from themselves.
DATABASE_SETTINGS = {
    "citus.propagate_set_commands": "local",
    "citus.override_table_visibility": "off",
}

_ON_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"

_TABLES = """
SELECT c.oid::regclass::text AS name, c.relpersistence = 'u' AS unlogged,
    EXISTS (SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
        AS per_tenant,
    EXISTS (SELECT 1 FROM pg_dist_partition d WHERE d.logicalrelid = c.oid) AS distributed,
    ARRAY(SELECT DISTINCT f.confrelid::regclass::text FROM pg_constraint f
          WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid <> c.oid) AS references
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1::text[]) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY 1"""

_SCHEMA_GRANTS = """
SELECT n.nspname AS schema, a.privilege_type AS privilege, a.grantee::regrole::text AS grantee
FROM pg_namespace n, aclexplode(n.nspacl) a
WHERE n.nspname = ANY($1::text[]) AND a.grantee <> n.nspowner AND a.grantee <> 0
ORDER BY 1, 3, 2"""

# EXECUTE granted on functions that PUBLIC may not execute (the SECURITY DEFINER ones), to
# roles other than their owner: on the coordinator the operator's default privileges gave it,
# which the workers' copies of the functions lack.
_FUNCTION_GRANTS = """
SELECT p.oid::regprocedure::text AS signature, a.grantee::regrole::text AS grantee
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
     aclexplode(p.proacl) a
WHERE n.nspname = ANY($1::text[]) AND p.proacl IS NOT NULL
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0
  AND NOT EXISTS (SELECT 1 FROM aclexplode(p.proacl) x
                  WHERE x.grantee = 0 AND x.privilege_type = 'EXECUTE')
ORDER BY 1, 2"""

_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature,
    $2 = ANY(coalesce(p.proargnames, '{}')) AS per_tenant,
    o.objid IS NOT NULL AS distributed,
    o.distribution_argument_index IS NOT NULL AS delegated,
    EXISTS (SELECT 1 FROM unnest(p.proconfig) s WHERE s LIKE 'plan\\_cache\\_mode=%') AS planned
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
WHERE n.nspname = ANY($1::text[]) AND p.prokind = 'f'
ORDER BY 1"""


async def on_citus(conn: asyncpg.Connection) -> bool:
    """Whether the database has the citus extension (a coordinator, or a worker)."""
    return bool(await conn.fetchval(_ON_CITUS))


async def distributed(conn: asyncpg.Connection, schemas: Sequence[str]) -> bool:
    """Whether any table of the schemas is distributed already (distribution was asked for)."""
    if not await on_citus(conn):
        return False
    return any(t["distributed"] for t in await conn.fetch(_TABLES, list(schemas)))


Table = Mapping[str, Any]  # a row of _TABLES


def distribution_order(tables: Sequence[Table]) -> list[Table]:
    """Referenced tables before the tables referring to them (Citus distributes a table with a
    foreign key only after the table it references); otherwise by name."""
    by_name = {t["name"]: t for t in tables}
    done: set[str] = set()
    ordered: list[Table] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in done or name not in by_name or name in path:
            return
        for referenced in sorted(by_name[name]["references"]):
            visit(referenced, (*path, name))
        done.add(name)
        ordered.append(by_name[name])

    for name in sorted(by_name):
        visit(name, ())
    return ordered


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_DATABASE_SETTING = """
SELECT EXISTS (SELECT 1 FROM pg_db_role_setting s, unnest(s.setconfig) c
               WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = $1)
                 AND s.setrole = 0 AND c = $2)"""


@dataclass
class Distribution:
    """What `distribute` did, one line each: `steps` change the cluster once (a second run
    finds none left); `grants` are issued on every run (the workers' copies of the schemas
    cannot be read from the coordinator by the owner, so they are not compared)."""

    steps: list[str] = field(default_factory=list)
    grants: list[str] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        return [*self.steps, *self.grants]


async def distribute(conn: asyncpg.Connection, schemas: Sequence[str]) -> Distribution:
    """Distributes what is not yet distributed; returns what it did, one line per step."""
    if not await on_citus(conn):
        raise RuntimeError(
            "--distribute needs a Citus coordinator: this database has no citus extension"
        )
    wanted = list(schemas)
    result = Distribution()
    done = result.steps
    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        # A trigger on a distributed table fires on its shards: the ledger's append-only guard
        # (budget migration 0002) is a row trigger that only raises.
        await conn.execute("SET citus.enable_unsafe_triggers = on")
        tables = await conn.fetch(_TABLES, wanted)
        for table in tables:
            if table["unlogged"] and not table["distributed"]:
                await conn.execute(f"ALTER TABLE {table['name']} SET LOGGED")
                done.append(f"logged {table['name']}")
        anchor = next((t["name"] for t in tables if t["distributed"] and t["per_tenant"]), None)
        for table in distribution_order(tables):
            if table["distributed"]:
                continue
            name = table["name"]
            if not table["per_tenant"]:
                await conn.execute("SELECT create_reference_table($1)", name)
                done.append(f"reference table {name}")
            elif anchor is None:
                await conn.execute("SELECT create_distributed_table($1, 'tenant_id')", name)
                anchor = name
                done.append(f"distributed {name} by tenant_id")
            else:
                await conn.execute(
                    "SELECT create_distributed_table($1, 'tenant_id', colocate_with => $2)",
                    name,
                    anchor,
                )
                done.append(f"distributed {name} by tenant_id, co-located with {anchor}")
        for grant in await conn.fetch(_SCHEMA_GRANTS, wanted):
            await conn.execute(
                f"GRANT {grant['privilege']} ON SCHEMA {_quote(grant['schema'])}"
                f" TO {grant['grantee']}"
            )
            result.grants.append(
                f"granted {grant['privilege']} on schema {grant['schema']} to {grant['grantee']}"
            )
        for function in await conn.fetch(_FUNCTIONS, wanted, TENANT_ARGUMENT):
            signature = function["signature"]
            if function["per_tenant"] and function["planned"]:
                await conn.execute(f"ALTER FUNCTION {signature} RESET plan_cache_mode")
            if function["per_tenant"] and not function["delegated"] and anchor is not None:
                await conn.execute(
                    "SELECT create_distributed_function($1::regprocedure, $2,"
                    " colocate_with => $3, force_delegation => true)",
                    signature,
                    TENANT_ARGUMENT,
                    anchor,
                )
                done.append(f"delegated {signature} by {TENANT_ARGUMENT}")
            elif not function["distributed"]:
                await conn.execute(
                    "SELECT create_distributed_function($1::regprocedure)", signature
                )
                done.append(f"distributed {signature}")
        for grant in await conn.fetch(_FUNCTION_GRANTS, wanted):
            await conn.execute(
                f"GRANT EXECUTE ON FUNCTION {grant['signature']} TO {grant['grantee']}"
            )
            result.grants.append(f"granted EXECUTE on {grant['signature']} to {grant['grantee']}")
        database = await conn.fetchval("SELECT current_database()")
        for setting, value in DATABASE_SETTINGS.items():
            if await conn.fetchval(_DATABASE_SETTING, database, f"{setting}={value}"):
                continue
            await conn.execute(f"ALTER DATABASE {_quote(database)} SET {setting} = '{value}'")
            done.append(f"set {setting} = '{value}' on database {database}")
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    return result
