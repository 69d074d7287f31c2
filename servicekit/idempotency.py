"""Request-id idempotency: the response is stored with the effect, in the same transaction.

A mutating RPC runs as `await idempotent(db, table, key, work)`. `work(conn)` performs the effect
inside the transaction and returns the encoded response (stored and returned) or a DomainError
(its effects are committed, nothing is stored, and the error is raised: e.g. a breach that fails
the run and is also refused). A retry with the same id replays the stored bytes; the same id with
a different fingerprint is INVALID_ARGUMENT REQUEST_ID_REUSED.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg

from servicekit.db import Database
from servicekit.errors import DomainError, ErrorKind

_TABLE = re.compile(r"^[a-z_]+\.[a-z_]+$")

# Schema for a service's table (in its own migration):
#   CREATE TABLE <schema>.request_log (
#       tenant_id text NOT NULL, request_id text NOT NULL, fingerprint bytea NOT NULL,
#       response bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
#       PRIMARY KEY (tenant_id, request_id));


@dataclass(frozen=True)
class RequestKey:
    tenant: str
    request_id: str
    fingerprint: bytes

    @classmethod
    def of(cls, tenant: str, request_id: str, method: str, payload: bytes) -> RequestKey:
        """The fingerprint covers the method and the deterministic request bytes."""
        digest = hashlib.sha256(method.encode() + b"\0" + payload).digest()
        return cls(tenant, request_id, digest)


def request_id_reused(request_id: str) -> DomainError:
    return DomainError(
        ErrorKind.INVALID,
        "REQUEST_ID_REUSED",
        "this request_id was already used with a different request",
        metadata={"requestId": request_id},
    )


class _Duplicate(Exception):
    """A concurrent twin committed first; rerun to replay its response."""


Work = Callable[[asyncpg.Connection], Awaitable["bytes | DomainError"]]


async def idempotent(db: Database, table: str, key: RequestKey, work: Work) -> bytes:
    if not _TABLE.match(table):
        raise ValueError(f"bad table name {table!r}")
    select = f"SELECT fingerprint, response FROM {table} WHERE tenant_id = $1 AND request_id = $2"
    insert = (
        f"INSERT INTO {table} (tenant_id, request_id, fingerprint, response)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1"
    )

    async def attempt(conn: asyncpg.Connection) -> bytes | DomainError:
        stored = await conn.fetchrow(select, key.tenant, key.request_id)
        if stored is not None:
            if bytes(stored["fingerprint"]) != key.fingerprint:
                raise request_id_reused(key.request_id)
            return bytes(stored["response"])
        outcome = await work(conn)
        if isinstance(outcome, DomainError):
            return outcome
        stored_now = await conn.fetchval(
            insert, key.tenant, key.request_id, key.fingerprint, outcome
        )
        if stored_now is None:
            raise _Duplicate
        return outcome

    for _ in range(2):
        try:
            result = await db.transaction(attempt)
        except _Duplicate:
            continue
        if isinstance(result, DomainError):
            raise result
        return result
    raise AssertionError("a duplicate request id raced twice")  # the second read must replay


async def forget_older_than(conn: asyncpg.Connection, table: str, hours: int) -> int:
    """Deletes stored responses past retention (kept at least 24 hours), every tenant's: through
    the schema's `purge_request_log` function, the one narrow way past row-level security."""
    if not _TABLE.match(table):
        raise ValueError(f"bad table name {table!r}")
    schema = table.split(".")[0]
    return int(await conn.fetchval(f"SELECT {schema}.purge_request_log($1)", hours))
