"""Vectors for relevance: query embeddings (cached) and each revision's matrix, filled once."""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Sequence

import asyncpg
import numpy as np

from memory_service.adapters.embedder import DIMENSION, Embedder, to_bytes
from memory_service.domain.candidate_index import CandidateIndex
from memory_service.store import candidate_reads as store_candidates
from memory_service.store.writes import MemoryKey
from servicekit.cpu import CpuPool
from servicekit.db import Database
from servicekit.tenancy import for_tenant

# Entries written while the embedder was off are embedded in batches, each stored in its own
# short transaction, so a long backfill keeps its progress even if its first caller gives up.
BACKFILL_BATCH = 32
# Orchestrators repeat their queries (the same task prompt every turn): embedding one costs
# milliseconds of CPU, looking it up microseconds.
QUERY_CACHE_SIZE = 1024


class Vectors:
    """The embedder's side of relevance ranking; inference always runs off the event loop."""

    def __init__(self, embedder: Embedder, db: Database, cpu: CpuPool) -> None:
        self._embedder = embedder
        self._db = db
        self._cpu = cpu
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._embedding: dict[tuple[str, str], asyncio.Task[np.ndarray]] = {}
        self._filling: dict[CandidateIndex, asyncio.Task[np.ndarray]] = {}

    async def query(self, tenant: str, text: str) -> np.ndarray:
        """The query's vector (cached), embedded on the CPU pool as one job of `tenant` however
        many of its calls ask for it at once: a burst of one new query is one job, not one per
        call, so it neither costs the tenant its share nor the pool its workers."""
        vector = self._queries.get(text)
        if vector is not None:
            self._queries.move_to_end(text)
            return vector
        key = (tenant, text)
        task = self._embedding.get(key)
        if task is None:
            # Shared by the callers that wait: no single call's deadline stops it.
            job = self._cpu.run(tenant, self._embedder.embed, text, deadline=None)
            task = self._embedding[key] = asyncio.create_task(job)
            task.add_done_callback(functools.partial(self._embedded, key))
        return await asyncio.shield(task)

    def _embedded(self, key: tuple[str, str], task: asyncio.Task[np.ndarray]) -> None:
        self._embedding.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # the waiters see the failure; nothing is cached
        self._queries[key[1]] = task.result()
        if len(self._queries) > QUERY_CACHE_SIZE:
            self._queries.popitem(last=False)

    async def matrix(
        self,
        tenant: str,
        key: MemoryKey,
        revision: int,
        index: CandidateIndex,
        donor: CandidateIndex | None = None,
    ) -> np.ndarray:
        """The index's vector matrix (row i = index.rows[i]), loaded once per index.

        `donor`, another index of the same memory that has its vectors, lends the rows of the
        versions both hold (a version's vector never changes), so a read after a write fetches
        the new versions' vectors only. Callers must hold no connection while waiting: the
        fill runs its own transactions, is shared by concurrent callers and outlives each one.
        """
        if index.vectors is not None:
            return index.vectors
        task = self._filling.get(index)
        if task is None:
            task = asyncio.create_task(self._fill(tenant, key, revision, index, donor))
            self._filling[index] = task

            def done(finished: asyncio.Task[np.ndarray]) -> None:
                self._filling.pop(index, None)
                if not finished.cancelled():
                    finished.exception()  # retrieved: a failure is reported to the waiters

            task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _fill(
        self,
        tenant: str,
        key: MemoryKey,
        revision: int,
        index: CandidateIndex,
        donor: CandidateIndex | None,
    ) -> np.ndarray:
        db = for_tenant(self._db, tenant)
        ids = [row.entry_version_id for row in index.rows]
        lent: dict[str, int] = {}
        lender = None if donor is None else donor.vectors
        if donor is not None and lender is not None:
            rows = {row.entry_version_id: i for i, row in enumerate(donor.rows)}
            lent = {i: rows[i] for i in ids if i in rows}
        wanted = [i for i in ids if i not in lent]

        async def stored_vectors(conn: asyncpg.Connection) -> dict[str, bytes | None]:
            if len(wanted) * 4 > len(ids):  # most are new: one scan of the memory is cheaper
                return await store_candidates.embeddings_upto(conn, key, revision)
            return await store_candidates.embeddings_of(conn, key, wanted)

        stored = await db.read(stored_vectors) if wanted else {}
        missing = [i for i in wanted if stored.get(i) is None]
        for start in range(0, len(missing), BACKFILL_BATCH):
            stored.update(
                await self._backfill(tenant, db, key, missing[start : start + BACKFILL_BATCH])
            )
        matrix = np.empty((len(ids), DIMENSION), dtype=np.float32)
        if lender is not None and lent:
            mine = [n for n, i in enumerate(ids) if i in lent]
            matrix[mine] = lender[[lent[ids[n]] for n in mine]]
        for n, version_id in enumerate(ids):
            if version_id not in lent:
                matrix[n] = np.frombuffer(stored[version_id] or b"", dtype="<f4")
        index.vectors = matrix
        return matrix

    async def _backfill(
        self, tenant: str, db: Database, key: MemoryKey, version_ids: Sequence[str]
    ) -> dict[str, bytes]:
        async def contents(conn: asyncpg.Connection) -> dict[str, str]:
            found = await store_candidates.contents_of(conn, key, version_ids)
            return {i: c.content for i, c in found.items()}

        texts = await db.read(contents)
        # The fill is shared by concurrent callers and outlives each one: no call's deadline.
        vectors = await self._cpu.run(
            tenant, self._embedder.embed_many, [texts[i] for i in version_ids], deadline=None
        )
        blobs = {i: to_bytes(v) for i, v in zip(version_ids, vectors, strict=True)}

        async def store(conn: asyncpg.Connection) -> None:
            await store_candidates.store_embeddings(conn, key, blobs)

        await db.transaction(store)
        return blobs
