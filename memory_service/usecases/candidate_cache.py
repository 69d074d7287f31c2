"""Per-process LRU of candidate indexes, keyed by (tenant, memory_id, revision), built once."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from uuid import UUID

from memory_service.domain.candidate_index import CandidateIndex

CacheKey = tuple[str, UUID, int]  # (tenant, memory_id, revision)


class _Abandoned(Exception):
    """The build a caller was waiting for failed or was cancelled; it builds one itself."""


class CandidateCache:
    """Caches immutable data only, which is why replicas never need to agree on it.

    A revision's manifest never changes once committed: later writes (compaction included)
    create new revisions, no past revision or entry version is deleted, and an uncommitted
    revision is never anyone's head. So the index built for (tenant, memory_id, revision) is
    correct forever, in every process. What does change, the head revision and the clock that
    decides expiry, is read from Postgres on every call and never cached.

    Bounded by weight (CandidateIndex.weight, about 1 KiB a unit: a row counts 1, its vector 2
    more, its cached content 1 per 1,024 characters), so RATION_MEMORY_CACHE_ENTRIES=200000
    keeps a worker's cache near 200 MB at most; least recently used indexes go first.
    Concurrent misses of one key share a single build.
    """

    def __init__(self, max_weight: int) -> None:
        self._max_weight = max_weight
        self._entries: OrderedDict[CacheKey, CandidateIndex] = OrderedDict()
        self._weights: dict[CacheKey, int] = {}
        self._total = 0
        self._building: dict[CacheKey, asyncio.Future[CandidateIndex]] = {}

    @property
    def weight(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: CacheKey) -> CandidateIndex | None:
        """The cached index, or None; never builds."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    async def get(
        self, key: CacheKey, build: Callable[[], Awaitable[CandidateIndex]]
    ) -> CandidateIndex:
        while True:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
            pending = self._building.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except _Abandoned:
                continue
        future: asyncio.Future[CandidateIndex] = asyncio.get_running_loop().create_future()
        # Nobody may be waiting: retrieve the exception so asyncio does not log it as lost.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._building[key] = future
        try:
            index = await build()
        except BaseException:
            future.set_exception(_Abandoned())
            raise
        finally:
            del self._building[key]
        future.set_result(index)
        self._store(key, index)
        return index

    def newest(
        self, tenant: str, memory_id: UUID, *, with_vectors: bool = False
    ) -> CandidateIndex | None:
        """The newest cached index of this memory (with its vectors loaded, if asked), which
        can lend a new revision's index what they share: versions never change."""
        found: tuple[int, CandidateIndex] | None = None
        for (t, m, revision), index in self._entries.items():
            usable = t == tenant and m == memory_id
            usable = usable and (index.vectors is not None or not with_vectors)
            if usable and (found is None or revision > found[0]):
                found = (revision, index)
        return None if found is None else found[1]

    def reweigh(self, key: CacheKey) -> None:
        """Counts an index again after it grew (its vectors were loaded)."""
        index = self._entries.get(key)
        if index is not None:
            self._total += index.weight - self._weights[key]
            self._weights[key] = index.weight
            self._evict()

    def _store(self, key: CacheKey, index: CandidateIndex) -> None:
        if index.weight > self._max_weight:
            return  # larger than the whole cache: served, never kept
        self._entries[key] = index
        self._weights[key] = index.weight
        self._total += index.weight
        self._evict()

    def _evict(self) -> None:
        while self._total > self._max_weight and self._entries:
            key, _ = self._entries.popitem(last=False)
            self._total -= self._weights.pop(key)
