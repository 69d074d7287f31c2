"""Budget SQL of issued API keys: a tenant's keys and secrets, and the owner's lookups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from budget_service.domain.api_keys import ApiKey

_KEY_COLUMNS = """k.key_id, k.roles, k.principal, k.created_at, k.revoked_at,
    EXISTS (SELECT 1 FROM budget.scope_budgets s WHERE s.tenant_id = k.tenant_id
            AND s.scope = 'api_key' AND s.scope_id = k.key_id) AS has_budget"""

_INSERT_KEY = """
INSERT INTO budget.api_keys (tenant_id, key_id, roles, principal) VALUES ($1, $2, $3, $4)"""

_INSERT_SECRET = """
INSERT INTO budget.api_key_secrets (tenant_id, key_id, secret_sha256) VALUES ($1, $2, $3)"""

_KEY = f"SELECT {_KEY_COLUMNS} FROM budget.api_keys k WHERE k.tenant_id = $1 AND k.key_id = $2"

_LOCK_KEY = "SELECT revoked_at FROM budget.api_keys WHERE tenant_id = $1 AND key_id = $2 FOR UPDATE"

_PAGE = f"""
SELECT {_KEY_COLUMNS} FROM budget.api_keys k
WHERE k.tenant_id = $1 AND ($2::text IS NULL OR k.key_id COLLATE "C" > $2)
  AND ($3 OR k.revoked_at IS NULL)
ORDER BY k.key_id COLLATE "C" LIMIT $4"""

# The key's live secrets end after the overlap (never later than they already would).
_END_SECRETS = """
UPDATE budget.api_key_secrets
SET not_after = least(coalesce(not_after, 'infinity'), now() + make_interval(secs => $3))
WHERE tenant_id = $1 AND key_id = $2 AND (not_after IS NULL OR not_after > now())
RETURNING not_after"""

_REVOKE = """
UPDATE budget.api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND key_id = $2"""

# Before the tenant is known: the owner's SECURITY DEFINER function (migration 0015). A cache
# miss reads the same rows for one digest (the secrets table is small: live secrets only).
_ALL_LIVE = "SELECT * FROM budget.api_key_identities_v1()"
_ONE_LIVE = "SELECT * FROM budget.api_key_identities_v1() WHERE secret_sha256 = $1"


@dataclass(frozen=True)
class LiveSecret:
    """What authentication needs of one live secret: never the key, only its digest."""

    sha: str
    tenant: str
    key_id: str
    roles: tuple[str, ...]
    principal: str
    valid_seconds: float | None  # None: until rotated or revoked


def _key(row: Any) -> ApiKey:
    return ApiKey(
        key_id=row["key_id"],
        roles=tuple(row["roles"]),
        principal=row["principal"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
        has_budget=row["has_budget"],
    )


def _live(row: Any) -> LiveSecret:
    return LiveSecret(
        row["secret_sha256"],
        row["tenant_id"],
        row["key_id"],
        tuple(row["roles"]),
        row["principal"],
        row["valid_seconds"],
    )


async def insert_key(
    conn: asyncpg.Connection,
    tenant: str,
    key_id: str,
    roles: Sequence[str],
    principal: str,
    sha: str,
) -> None:
    await conn.execute(_INSERT_KEY, tenant, key_id, list(roles), principal)
    await conn.execute(_INSERT_SECRET, tenant, key_id, sha)


async def get_key(conn: asyncpg.Connection, tenant: str, key_id: str) -> ApiKey | None:
    row = await conn.fetchrow(_KEY, tenant, key_id)
    return None if row is None else _key(row)


async def lock_key(conn: asyncpg.Connection, tenant: str, key_id: str) -> tuple[bool, bool]:
    """(exists, revoked), the key row locked until the transaction ends."""
    row = await conn.fetchrow(_LOCK_KEY, tenant, key_id)
    return (row is not None, row is not None and row["revoked_at"] is not None)


async def rotate(
    conn: asyncpg.Connection, tenant: str, key_id: str, sha: str, overlap_seconds: int
) -> datetime | None:
    """Ends the key's live secrets after the overlap and adds `sha`; returns when the previous
    ones stop (None when there were none)."""
    ended = await conn.fetch(_END_SECRETS, tenant, key_id, float(overlap_seconds))
    await conn.execute(_INSERT_SECRET, tenant, key_id, sha)
    ends = [r["not_after"] for r in ended]
    return max(ends) if ends else None


async def revoke(conn: asyncpg.Connection, tenant: str, key_id: str) -> None:
    await conn.execute(_REVOKE, tenant, key_id)


async def page(
    conn: asyncpg.Connection, tenant: str, after: str | None, include_revoked: bool, limit: int
) -> list[ApiKey]:
    return [_key(r) for r in await conn.fetch(_PAGE, tenant, after, include_revoked, limit)]


async def all_live(conn: asyncpg.Connection) -> list[LiveSecret]:
    return [_live(r) for r in await conn.fetch(_ALL_LIVE)]


async def one_live(conn: asyncpg.Connection, sha: str) -> LiveSecret | None:
    row = await conn.fetchrow(_ONE_LIVE, sha)
    return None if row is None else _live(row)
