"""The per-process cache of live issued API keys: what authentication looks keys up in."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from budget_service.store import api_keys as store
from budget_service.store.api_keys import LiveSecret
from servicekit.auth import Identity
from servicekit.db import Database
from servicekit.errors import store_unavailable

log = logging.getLogger(__name__)

# Database lookups of digests the cache does not hold, at once per process: a caller spraying
# unknown tokens costs at most this many concurrent reads, and each unknown digest is read at
# most once per refresh interval (MAX_MISSES of them remembered).
MAX_LOOKUPS = 4
MAX_MISSES = 10_000
# A cache not refreshed for this many intervals (the database unreachable) is not trusted:
# every issued key is then looked up, and refused while the lookup fails (fail closed).
STALE_INTERVALS = 3


class KeyCache:
    """Digest → identity of every live secret, reloaded whole every `refresh_seconds` (so a
    revoked key or an ended overlap leaves every replica within about two intervals, without
    LISTEN/NOTIFY, which Citus does not deliver); a digest it does not hold (a key minted on
    another replica a moment ago) is looked up once in the database. Lookups are constant
    time; a secret's end is also checked on the hot path, by this process's clock."""

    def __init__(
        self,
        database: Database,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = database
        self._clock = clock
        self._refresh_seconds = refresh_seconds
        self._entries: dict[str, tuple[Identity, float]] = {}
        self._misses: dict[str, float] = {}
        self._lookups = asyncio.Semaphore(MAX_LOOKUPS)
        self._trusted_until = 0.0  # monotonic; until the first refresh every key is looked up

    @staticmethod
    def _entry(secret: LiveSecret, now: float) -> tuple[Identity, float]:
        identity = Identity(
            secret.tenant, frozenset(secret.roles), secret.principal, key_id=secret.key_id
        )
        until = math.inf if secret.valid_seconds is None else now + secret.valid_seconds
        return identity, until

    def cached(self, sha: str) -> Identity | None:
        entry = self._entries.get(sha)
        now = self._clock()
        if entry is None or entry[1] <= now or now > self._trusted_until:
            return None
        return entry[0]

    async def fetch(self, sha: str) -> Identity | None:
        """Raises STORE_UNAVAILABLE when the database cannot be read (the caller retries)."""
        now = self._clock()
        if self._misses.get(sha, 0.0) > now:
            return None
        try:
            async with self._lookups:
                found = await self._db.upkeep_transaction(lambda conn: store.one_live(conn, sha))
        except Exception as exc:  # fail closed: never let in; the caller may retry
            log.warning("issued key lookup failed", extra={"error": type(exc).__name__})
            raise store_unavailable() from None
        now = self._clock()
        if found is None:
            if len(self._misses) >= MAX_MISSES:
                self._misses = {}
            self._misses[sha] = now + self._refresh_seconds
            return None
        entry = self._entry(found, now)
        self._entries[sha] = entry
        return entry[0] if entry[1] > now else None

    async def refresh(self) -> None:
        """Replaces the whole cache with the database's live secrets (one swap)."""
        found = await self._db.upkeep_transaction(store.all_live)
        now = self._clock()
        self._entries = {s.sha: self._entry(s, now) for s in found}
        self._misses = {}
        self._trusted_until = now + STALE_INTERVALS * self._refresh_seconds

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # keep the last good cache; retry next interval
                log.warning("issued keys refresh failed", extra={"error": type(exc).__name__})
            await asyncio.sleep(self._refresh_seconds)
