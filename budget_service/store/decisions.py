"""Budget SQL of the per-call protocol: a batch of Reserve, Consume, Release (or Check) items of
one tenant, decided by `budget.decide_v2` (store/functions/) in one statement.

The engine holds every rule; this module only passes the batch as one array of
`budget.decide_item_v2` (asyncpg encodes a composite from a tuple in the type's field order)
and reads the per-item answers back. The statement is its own transaction (no BEGIN/COMMIT
round trips): when it returns, the batch has committed. A twin request id that another
replica committed while the batch waited for its locks fails the request-log insert with
unique_violation; the statement rolled back as a whole and runs again, and then replays the
twin's reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from servicekit.db import Database

DONE, REPLAY, REUSED, NOT_FOUND, REFUSED, INVALID, CHECKED = (
    "done",
    "replay",
    "reused",
    "not_found",
    "refused",
    "invalid",
    "checked",
)

_DECIDE = (
    "SELECT outcomes, responses, refusals, tallies"
    " FROM budget.decide_v2($1, $2, $3, $4::budget.decide_item_v2[])"
)

_TWIN = (asyncpg.exceptions.UniqueViolationError,)


@dataclass(frozen=True)
class Item:
    """One request of a batch; `amounts` is the estimate or usage in Dimension order."""

    kind: str  # reserve | consume | release | check
    run_id: str
    amounts: tuple[int, int, int, int] = (0, 0, 0, 0)
    request_id: str = ""
    fingerprint: bytes = b""
    reservation_id: str = ""  # reserve: the new hold's id; consume: "" means no hold
    model: str = ""
    up_to: bool = False
    ttl_seconds: int = 0


@dataclass(frozen=True)
class Answer:
    outcome: str
    response: bytes | None  # the reply document (done, replay) or the Check verdict
    refusal: dict[str, Any] | None  # the reason and its facts (refused, invalid, not_found)
    tally: dict[str, Any] | None  # what the metrics count, once committed


def _loads(value: str | None) -> dict[str, Any] | None:
    return None if value is None else dict(json.loads(value))


def _composite(i: Item) -> tuple[object, ...]:
    """The item as a `budget.decide_item_v2`, field for field (migration 0014)."""
    tokens, cost_nanos, tool_calls, retries = i.amounts
    return (
        i.kind,
        i.request_id,
        i.fingerprint,
        i.run_id,
        i.reservation_id,
        i.model,
        tokens,
        cost_nanos,
        tool_calls,
        retries,
        i.up_to,
        i.ttl_seconds,
    )


async def _call(
    conn: asyncpg.Connection, tenant: str, items: Sequence[Item], host_advisory: bool, check: bool
) -> list[Answer]:
    row = await conn.fetchrow(
        _DECIDE,
        tenant,
        host_advisory,
        check,
        [_composite(i) for i in items],
    )
    return [
        Answer(outcome, None if response is None else bytes(response), _loads(r), _loads(t))
        for outcome, response, r, t in zip(
            row["outcomes"], row["responses"], row["refusals"], row["tallies"], strict=True
        )
    ]


async def decide(
    db: Database, tenant: str, items: Sequence[Item], host_advisory: bool
) -> list[Answer]:
    """Decides and commits the batch; one answer per item, in order."""

    async def run(conn: asyncpg.Connection) -> list[Answer]:
        return await _call(conn, tenant, items, host_advisory, False)

    return await db.statement(run, retry_on=_TWIN)


async def check(
    db: Database, tenant: str, items: Sequence[Item], host_advisory: bool
) -> list[Answer]:
    """Judges 'check' items exactly as Reserve would, read-only (no locks, no writes)."""

    async def run(conn: asyncpg.Connection) -> list[Answer]:
        return await _call(conn, tenant, items, host_advisory, True)

    return await db.read(run)
