"""Budget SQL of the run lifecycle: OpenRun, CloseRun, ResumeRun and the sweeper's expiry, each
one call of an engine function (store/functions/) that locks, decides and writes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import asyncpg

from budget_service.domain.policy import Dimension, HostCeilings
from budget_service.domain.records import RunRecord
from budget_service.domain.run_state import Amounts, RunOutcome
from budget_service.store import rows

# What a lifecycle function reports besides 'done': no such run (or, for the sweeper, a busy
# one), or a twin request that committed while this one waited for the run's lock.
MISSING, APPLIED = "missing", "applied"

_OPEN = (
    "SELECT budget.open_run_v2($1, $2, $3, $4, $5, $6, $7::bigint[], $8, $9, $10::jsonb,"
    " $11::jsonb, $12::text[], $13::text[], $14, $15, $16, $17, $18::jsonb)"
)
_CLOSE = "SELECT status, expired, released FROM budget.close_run_v1($1, $2, $3, $4)"
_RESUME = (
    "SELECT status, state, dimensions, expired"
    " FROM budget.resume_run_v1($1, $2, $3, $4::bigint[], $5::bigint[], $6, $7)"
)
_EXPIRE = "SELECT budget.expire_run_v1($1, $2)"


@dataclass(frozen=True)
class Closed:
    status: str  # 'done', MISSING or APPLIED
    expired: int
    released: int


@dataclass(frozen=True)
class Resumed:
    """status: 'done', 'refused' (`state`), 'negative' or 'overflow' (`dimensions`, by their
    JSON names), MISSING or APPLIED."""

    status: str
    state: str | None
    dimensions: tuple[str, ...]
    expired: int


async def open_run(conn: asyncpg.Connection, tenant: str, run: RunRecord, request_id: str) -> bool:
    """Creates the run with its 'open' ledger row and budget.reserved; False when the run id
    exists (nothing written; the caller compares fingerprints)."""
    b = run.budget
    inserted: bool = await conn.fetchval(
        _OPEN,
        tenant,
        run.run_id,
        run.project_id,
        run.workflow_id,
        run.agent_id,
        run.open_fingerprint,
        [b.limit(d) for d in Dimension],
        b.threshold_percent,
        b.on_exhaustion.value,
        json.dumps(rows.binding_json(b)),
        rows.model_lists_json(b.model_lists),
        [p.scope.value for p in run.pools],
        [p.scope_id for p in run.pools],
        run.scope_advisory,
        request_id,
        run.end_user_id,
        run.api_key_id,
        json.dumps(dict(run.tags)),
    )
    return inserted


async def close_run(
    conn: asyncpg.Connection, tenant: str, run_id: str, request_id: str, outcome: RunOutcome
) -> Closed:
    row = await conn.fetchrow(_CLOSE, tenant, run_id, request_id, outcome.value)
    return Closed(row["status"], row["expired"], row["released"])


async def resume_run(
    conn: asyncpg.Connection,
    tenant: str,
    run_id: str,
    request_id: str,
    delta: Amounts,
    ceilings: HostCeilings,
    approver: str,
    note: str,
) -> Resumed:
    row = await conn.fetchrow(
        _RESUME,
        tenant,
        run_id,
        request_id,
        [delta.get(d, 0) for d in Dimension],
        [ceilings.limit(d) for d in Dimension],
        approver,
        note,
    )
    return Resumed(row["status"], row["state"], tuple(row["dimensions"] or ()), row["expired"])


async def expire_run(conn: asyncpg.Connection, tenant: str, run_id: str) -> int:
    """The sweeper's expiry of one run's overdue holds; 0 when another call holds the run."""
    expired: int = await conn.fetchval(_EXPIRE, tenant, run_id)
    return expired
