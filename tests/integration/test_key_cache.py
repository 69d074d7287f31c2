"""The per-process key cache against real Postgres (as the application role): a reload drops a
revoked key, an overlap ends by the cache's own clock between reloads, a key minted elsewhere
is read on a miss, and a cache no longer refreshed stops being trusted (fail closed)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from budget_service.usecases.key_cache import STALE_INTERVALS, KeyCache
from budget_service.usecases.settings import BudgetSettings
from servicekit.db import Database
from servicekit.errors import DomainError
from servicekit.settings import Env
from tests.support.clock import ManualClock

REFRESH = 1.0


@pytest.fixture
async def app_db(app_database_url: str) -> AsyncIterator[Database]:
    env = Env({"RATION_DATABASE_URL": app_database_url, "RATION_BUDGET_METRICS_LISTEN": "off"})
    database = Database(app_database_url, BudgetSettings.from_env(env).database)
    await database.connect()
    yield database
    await database.close()


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def mint(db: asyncpg.Connection, key_id: str, secret: str, ends_in: float | None) -> None:
    """A key as CreateApiKey (and RotateApiKey, with an end) store it, written as superuser."""
    await db.execute(
        "INSERT INTO budget.api_keys (tenant_id, key_id, roles, principal)"
        " VALUES ('acme', $1, '{writer}', 'bot')",
        key_id,
    )
    await db.execute(
        "INSERT INTO budget.api_key_secrets (tenant_id, key_id, secret_sha256, not_after)"
        " VALUES ('acme', $1, $2, now() + make_interval(secs => $3))",
        key_id,
        sha(secret),
        ends_in,
    )


async def test_reloads_misses_overlaps_and_staleness(
    app_db: Database, db: asyncpg.Connection
) -> None:
    clock = ManualClock(1000.0)
    cache = KeyCache(app_db, REFRESH, clock)
    await mint(db, "key-a", "secret-a", None)
    await mint(db, "key-b", "secret-b", 30.0)  # a rotated-away secret: 30 s of overlap left
    assert cache.cached(sha("secret-a")) is None  # before the first reload nothing is trusted
    await cache.refresh()
    a = cache.cached(sha("secret-a"))
    assert a is not None
    assert (a.tenant, a.key_id, a.roles, a.principal) == (
        "acme",
        "key-a",
        frozenset({"writer"}),
        "bot",
    )
    assert cache.cached(sha("secret-b")) is not None

    clock.now += 31  # the overlap ended between reloads: refused by the cache's own clock
    assert cache.cached(sha("secret-b")) is None
    await db.execute("UPDATE budget.api_key_secrets SET not_after = now() WHERE key_id = 'key-b'")
    await cache.refresh()  # once the database's clock has passed it too, it is gone
    assert cache.cached(sha("secret-b")) is None
    assert await cache.fetch(sha("secret-b")) is None

    await db.execute("UPDATE budget.api_keys SET revoked_at = now() WHERE key_id = 'key-a'")
    assert cache.cached(sha("secret-a")) is not None  # until the next reload
    await cache.refresh()
    assert cache.cached(sha("secret-a")) is None
    assert await cache.fetch(sha("secret-a")) is None  # revoked: the database says no too

    await mint(db, "key-c", "secret-c", None)  # minted "on another replica"
    assert cache.cached(sha("secret-c")) is None
    c = await cache.fetch(sha("secret-c"))
    assert c is not None
    assert c.key_id == "key-c"
    assert cache.cached(sha("secret-c")) is not None

    clock.now += STALE_INTERVALS * REFRESH + 1  # no reload since: the cache is not trusted
    assert cache.cached(sha("secret-c")) is None
    assert await cache.fetch(sha("secret-c")) is not None  # each call reads the database
    await app_db.close()  # and without the database a key is refused, never let in
    with pytest.raises(DomainError) as failed:
        await cache.fetch(sha("secret-c"))
    assert failed.value.reason == "STORE_UNAVAILABLE"
