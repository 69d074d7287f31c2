"""Budget SQL of the one-round-trip path: calls the server-side functions of migration 0003
through their tenant entries of migration 0005 (which set ration.tenant_id for row-level
security from the tenant argument, in the same statement).

Each call is one statement and so its own transaction: the request-log check, the run lock,
the decision, every write and the stored reply commit together, and the run row is locked only
while Postgres works. A function answers 'slow' (having written nothing) when the Python path
must judge the call; see the migration for what it decides itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from budget_service.domain.commands import Consume, Release, Reserve
from budget_service.domain.policy import Dimension
from budget_service.domain.run_state import ReserveMode
from servicekit.db import Database
from servicekit.idempotency import RequestKey

DONE, REPLAY, REUSED, NOT_FOUND, SLOW = "done", "replay", "reused", "not_found", "slow"

_RESERVE = (
    "SELECT outcome, response, tally"
    " FROM budget.reserve_as_tenant($1, $2, $3, $4, $5, $6, $7::bigint[], $8, $9, $10)"
)
_CONSUME = (
    "SELECT outcome, response, tally"
    " FROM budget.consume_as_tenant($1, $2, $3, $4, $5, $6, $7::bigint[])"
)
_RELEASE = "SELECT outcome, response, tally FROM budget.release_as_tenant($1, $2, $3, $4, $5)"

# A twin with the same request id on another run committed first: the statement rolled back,
# and running it again replays the twin's reply (or refuses a reused id).
_TWIN = (asyncpg.exceptions.UniqueViolationError,)


@dataclass(frozen=True)
class Answer:
    outcome: str
    response: bytes | None = None
    tally: dict[str, Any] | None = None


def _amounts(values: Any) -> list[int]:
    return [int(values.get(d, 0)) for d in Dimension]


async def _call(db: Database, sql: str, *args: Any) -> Answer:
    async def run(conn: asyncpg.Connection) -> Answer:
        row = await conn.fetchrow(sql, *args)
        tally = row["tally"]
        return Answer(row["outcome"], row["response"], json.loads(tally) if tally else None)

    return await db.statement(run, retry_on=_TWIN)


async def reserve(
    db: Database,
    key: RequestKey,
    command: Reserve,
    reservation_id: str,
    ttl_seconds: int,
    host_advisory: bool,
) -> Answer:
    return await _call(
        db,
        _RESERVE,
        key.tenant,
        key.request_id,
        key.fingerprint,
        command.run_id,
        reservation_id,
        command.model,
        _amounts(command.estimate),
        command.mode is ReserveMode.UP_TO,
        ttl_seconds,
        host_advisory,
    )


async def consume(db: Database, key: RequestKey, command: Consume) -> Answer:
    return await _call(
        db,
        _CONSUME,
        key.tenant,
        key.request_id,
        key.fingerprint,
        command.run_id,
        command.reservation_id,
        command.model,
        _amounts(command.usage),
    )


async def release(db: Database, key: RequestKey, command: Release) -> Answer:
    return await _call(
        db,
        _RELEASE,
        key.tenant,
        key.request_id,
        key.fingerprint,
        command.run_id,
        command.reservation_id,
    )
