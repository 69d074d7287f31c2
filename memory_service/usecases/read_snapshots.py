"""How a read gets a snapshot of one revision: the head, the clock and the cached index."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import asyncpg

from memory_service.domain.candidate_index import CandidateIndex
from memory_service.domain.refusals import revision_not_found
from memory_service.store import candidate_reads as store_candidates
from memory_service.store.writes import MemoryKey
from memory_service.usecases.candidate_cache import CandidateCache
from memory_service.usecases.relevance_vectors import Vectors
from servicekit.auth import Identity
from servicekit.coalesce import Coalescer
from servicekit.db import Database
from servicekit.tenancy import for_tenant

T = TypeVar("T")
Head = tuple[MemoryKey, int, datetime]  # the memory, its head revision, the database clock


@dataclass(frozen=True)
class Snapshot:
    """What one read established: the memory, the revision, its index, and the clock."""

    key: MemoryKey
    revision: int
    index: CandidateIndex
    now: datetime


# The connection is None on the fast path, where anything not cached raises NeedDatabase.
Work = Callable[[asyncpg.Connection | None, Snapshot], Awaitable[T]]


class NeedDatabase(Exception):
    """A fast-path read found something uncached; the call goes the full way."""


class _NeedVectors(Exception):
    """Raised out of a read transaction so the vectors load without a connection held."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot


class Snapshots:
    """Fast path first (one statement, then the cache), the full path on any miss."""

    def __init__(self, db: Database, cache: CandidateCache, vectors: Vectors | None) -> None:
        self._db = db
        self._cache = cache
        self._vectors = vectors
        self._heads: Coalescer[str, str, Head] = Coalescer(self._fetch_heads)

    async def _fetch_heads(self, tenant: str, memory_refs: Sequence[str]) -> dict[str, Head]:
        return await self._db.read(
            lambda conn: store_candidates.heads_as_tenant(conn, tenant, memory_refs)
        )

    async def read(
        self,
        identity: Identity,
        memory_ref: str,
        revision: int | None,
        needs_vectors: bool,
        work: Work[T],
    ) -> T | None:
        """Runs `work` on a snapshot of the memory; None when this tenant has no such memory.

        Fast path: one statement (memory.heads_as_tenant enters the tenant, then reads the head
        and the clock), then the cache. A call the cache answers costs that one statement, which
        it shares with the tenant's other reads that arrived meanwhile (servicekit/coalesce.py).

        Full path, on any miss: a read transaction that enters the tenant and fills the cache.
        A revision's vectors are loaded outside any transaction (the first relevance read of a
        revision may embed entries written without an embedder); the read then starts over at
        that same revision with that same index, so it ends even if the cache could not keep it.
        """
        found = await self._heads.get(identity.tenant, memory_ref)
        if found is None:
            return None
        key, head, now = found
        at = head if revision is None else revision
        if at > head:
            raise revision_not_found(at, head)
        cached = self._cache.peek((identity.tenant, key.memory_id, at))
        if cached is not None and (cached.vectors is not None or not needs_vectors):
            try:
                return await self._run(work, None, Snapshot(key, at, cached, now))
            except NeedDatabase:
                pass
        return await self._read_through(identity, memory_ref, revision, needs_vectors, work)

    async def _read_through(
        self,
        identity: Identity,
        memory_ref: str,
        revision: int | None,
        needs_vectors: bool,
        work: Work[T],
    ) -> T | None:
        tenant = identity.tenant
        loaded: Snapshot | None = None

        async def read(conn: asyncpg.Connection) -> T | None:
            found = await store_candidates.head_and_now(conn, tenant, memory_ref)
            if found is None:
                return None
            key, head, now = found
            at = head if revision is None else revision
            if loaded is not None:  # the revision whose vectors were just loaded
                at = loaded.revision
            if at > head:
                raise revision_not_found(at, head)

            async def build() -> CandidateIndex:
                built = CandidateIndex(await store_candidates.candidates_at(conn, key, at))
                earlier = self._cache.newest(tenant, key.memory_id)
                if earlier is not None:  # contents it already fetched for shared versions
                    built.remember(earlier.contents)
                return built

            if loaded is not None and loaded.key == key:
                index = loaded.index
            else:
                index = await self._cache.get((tenant, key.memory_id, at), build)
            snapshot = Snapshot(key, at, index, now)
            if needs_vectors and index.vectors is None:
                raise _NeedVectors(snapshot)
            return await self._run(work, conn, snapshot)

        database = for_tenant(self._db, tenant)
        while True:
            try:
                return await database.read(read)
            except _NeedVectors as need:
                assert self._vectors is not None  # only relevance reads need vectors
                loaded = snap = need.snapshot
                donor = self._cache.newest(tenant, snap.key.memory_id, with_vectors=True)
                await self._vectors.matrix(tenant, snap.key, snap.revision, snap.index, donor)
                self._cache.reweigh((tenant, snap.key.memory_id, snap.revision))

    async def _run(self, work: Work[T], conn: asyncpg.Connection | None, snap: Snapshot) -> T:
        """Runs `work`, then counts what it added to the index (contents, memos) in the cache."""
        before = snap.index.weight
        try:
            return await work(conn, snap)
        finally:
            if snap.index.weight != before:
                self._cache.reweigh((snap.key.tenant, snap.key.memory_id, snap.revision))
