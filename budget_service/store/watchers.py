"""Budget SQL of the watchers table: which runs some process follows with WatchRunEvents.

The one-round-trip Consume (migration 0003) sends its NOTIFY only for a run with a watcher row:
PostgreSQL serializes every notifying commit on one cluster-wide lock held until the commit is
flushed, so notifying runs nobody follows would serialize Consumes for nothing.

Registering locks the run row FOR SHARE, which conflicts with the FOR UPDATE every writer takes
first. So a writer that holds the run when a watcher registers commits before the registration
does (and the watcher's first read after registering sees its events), and a writer that locks
the run after it sees the watcher row in its next statement (and notifies).
"""

from __future__ import annotations

from collections.abc import Collection

import asyncpg

Key = tuple[str, str]  # (tenant, run_id)

# Citus evaluates every non-immutable function of an INSERT on the coordinator, but cannot in
# DO UPDATE: the refreshed time is the one the insert would have written (EXCLUDED).
_REGISTER = """
WITH run AS (
    SELECT r.tenant_id, r.run_id FROM budget.runs r
    WHERE r.tenant_id = $1 AND r.run_id = $2
    FOR SHARE OF r
)
INSERT INTO budget.watchers (tenant_id, run_id, hub_id)
SELECT run.tenant_id, run.run_id, $3 FROM run
ON CONFLICT (tenant_id, run_id, hub_id) DO UPDATE SET seen_at = EXCLUDED.seen_at"""

# Where NOTIFY cannot reach the listener (Citus: decide_v2 runs on the worker that holds the
# tenant's shard), the event hub polls the runs its subscribers follow instead: a run's
# next_seq moves with every event written to its log, in the transaction that writes it.
_NEXT_SEQS = "SELECT run_id, next_seq FROM budget.runs WHERE tenant_id = $1 AND run_id = ANY($2)"

# Forgetting, refreshing and purging act on one process's rows (or stale ones) whatever their
# tenants: SECURITY DEFINER functions of migration 0005, past row-level security.
_FORGET = "SELECT budget.forget_watchers($1::text[], $2::text[], $3)"

# Rows still present are refreshed; the ones returned missing were purged (or never written).
_REFRESH = "SELECT tenant_id, run_id FROM budget.refresh_watchers($1::text[], $2::text[], $3)"

_ON_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"

# Rows of processes that stopped refreshing them (killed, or cut off from the database).
_PURGE = "SELECT budget.purge_watchers($1)"


async def register(conn: asyncpg.Connection, key: Key, hub_id: str) -> None:
    await conn.execute(_REGISTER, key[0], key[1], hub_id)


async def next_seqs(conn: asyncpg.Connection, tenant: str, run_ids: list[str]) -> dict[str, int]:
    """The next event seq of each of the tenant's runs (a run that does not exist is absent)."""
    found = await conn.fetch(_NEXT_SEQS, tenant, run_ids)
    return {r["run_id"]: r["next_seq"] for r in found}


async def on_citus(conn: asyncpg.Connection) -> bool:
    """Whether the database is a Citus cluster (its coordinator, as the services see it)."""
    return bool(await conn.fetchval(_ON_CITUS))


async def forget(conn: asyncpg.Connection, keys: Collection[Key], hub_id: str) -> None:
    await conn.execute(_FORGET, [k[0] for k in keys], [k[1] for k in keys], hub_id)


async def refresh(conn: asyncpg.Connection, keys: Collection[Key], hub_id: str) -> set[Key]:
    """Refreshes this process's rows; returns the keys whose row is gone."""
    rows = await conn.fetch(_REFRESH, [k[0] for k in keys], [k[1] for k in keys], hub_id)
    return set(keys) - {(r["tenant_id"], r["run_id"]) for r in rows}


async def purge(conn: asyncpg.Connection, stale_seconds: float) -> int:
    return int(await conn.fetchval(_PURGE, stale_seconds))
