"""Budget SQL of the per-call protocol: a batch of Reserve, Consume, Release (or Check) items of
one tenant, decided by `budget.decide_v3` (store/functions/) in one statement.

The engine holds every rule; this module only passes the batch as one array of
`budget.decide_item_v2` (asyncpg encodes a composite from a tuple in the type's field order)
and reads the per-item answers back. The statement is its own transaction (no BEGIN/COMMIT
round trips): when it returns, the batch has committed. A twin request id that another
replica committed while the batch waited for its locks fails the request-log insert with
unique_violation; the statement rolled back as a whole and runs again, and then replays the
twin's reply.

How the batch takes its runs' locks is the caller's choice: `decide` skips a run locked
elsewhere (its items come back BUSY, untouched), `decide(..., wait=True)` waits for it (the
lane of that one run, budget_service/usecases/reservations.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from servicekit.cpu import current_deadline
from servicekit.db import MIN_WORK_SECONDS, WORK_SHARE, Database
from servicekit.errors import store_busy

DONE, REPLAY, REUSED, NOT_FOUND, REFUSED, INVALID, CHECKED, BUSY = (
    "done",
    "replay",
    "reused",
    "not_found",
    "refused",
    "invalid",
    "checked",
    "busy",  # the item's run was locked elsewhere: not decided, nothing written
)

# How the engine takes the runs' locks (budget.lock_runs_v3): skip the locked ones, wait for
# them, or take none (Check).
SKIP, WAIT, READ = "skip", "wait", "read"

_DECIDE = (
    "SELECT outcomes, responses, refusals, tallies"
    " FROM budget.decide_v3($1, $2, $3, $4, $5::budget.decide_item_v2[])"
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


def _lock_wait_ms() -> int | None:
    """How long a waiting batch may wait for a lock: what its most impatient call's deadline
    leaves, less the share kept for the answer (servicekit/db.py); None without a deadline."""
    deadline = current_deadline()
    if deadline is None:
        return None
    remaining = deadline - time.monotonic()
    return max(1, int((remaining - max(MIN_WORK_SECONDS, remaining * WORK_SHARE)) * 1000))


async def _call(
    conn: asyncpg.Connection,
    tenant: str,
    items: Sequence[Item],
    host_advisory: bool,
    mode: str,
    lock_wait_ms: int | None = None,
) -> list[Answer]:
    row = await conn.fetchrow(
        _DECIDE,
        tenant,
        host_advisory,
        mode,
        lock_wait_ms,
        [_composite(i) for i in items],
    )
    return [
        Answer(outcome, None if response is None else bytes(response), _loads(r), _loads(t))
        for outcome, response, r, t in zip(
            row["outcomes"], row["responses"], row["refusals"], row["tallies"], strict=True
        )
    ]


class RunLocked(Exception):
    """A batch's brief wait for its runs' locks ran out: nothing was done (rolled back)."""


async def decide(
    db: Database,
    tenant: str,
    items: Sequence[Item],
    host_advisory: bool,
    *,
    wait: bool = False,
    brief_wait_ms: int | None = None,
) -> list[Answer]:
    """Decides and commits the batch; one answer per item, in order. Items of a run locked
    elsewhere are BUSY (not decided) unless `wait`, which waits for its lock within the
    batch's deadline (then STORE_BUSY, nothing done) and within the tenant's share of the
    pool's connections. With `brief_wait_ms` the batch waits for its runs' locks that long
    at most (another replica's batch holds a run for a few milliseconds), then raises
    RunLocked with nothing done."""
    if brief_wait_ms is not None:

        async def briefly(conn: asyncpg.Connection) -> list[Answer]:
            try:
                return await _call(conn, tenant, items, host_advisory, WAIT, brief_wait_ms)
            except asyncpg.exceptions.LockNotAvailableError:
                raise RunLocked from None

        return await db.statement(briefly, retry_on=_TWIN)
    if not wait:

        async def skipping(conn: asyncpg.Connection) -> list[Answer]:
            return await _call(conn, tenant, items, host_advisory, SKIP)

        return await db.statement(skipping, retry_on=_TWIN)

    async def waiting(conn: asyncpg.Connection) -> list[Answer]:
        try:
            return await _call(conn, tenant, items, host_advisory, WAIT, _lock_wait_ms())
        except asyncpg.exceptions.LockNotAvailableError:
            raise store_busy(
                "the run stayed locked by another transaction for as long as this call's"
                " deadline allows; nothing was done, retry"
            ) from None

    return await db.tenant_statement(tenant, waiting, retry_on=_TWIN)


async def check(
    db: Database, tenant: str, items: Sequence[Item], host_advisory: bool
) -> list[Answer]:
    """Judges 'check' items exactly as Reserve would, read-only (no locks, no writes)."""

    async def run(conn: asyncpg.Connection) -> list[Answer]:
        return await _call(conn, tenant, items, host_advisory, READ)

    return await db.read(run)
