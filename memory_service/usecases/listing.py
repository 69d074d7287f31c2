"""ListMemory and SearchMemory: rank a revision's candidates, then read only what is returned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from memory_service.adapters.budget_link import RemainingTokens
from memory_service.adapters.metrics import ListMetrics
from memory_service.domain.candidate_index import CandidateRow, Ranked, candidate_numbers
from memory_service.domain.commands import ListQuery, Rank, SearchMode, SearchQuery
from memory_service.domain.ids import validate_memory_ref
from memory_service.domain.read_input_rules import DEFAULT_SEARCH_LIMIT
from memory_service.domain.records import Item, ListResult, SearchResult
from memory_service.domain.refusals import budget_link_unavailable, relevance_unavailable
from memory_service.domain.selection import (
    Selection,
    StoppedBy,
    fit_response,
    fitting_count,
    select_prefix,
)
from memory_service.domain.token_counters import TokenCounter
from memory_service.store import candidate_reads as store_candidates
from memory_service.usecases.candidate_cache import CandidateCache
from memory_service.usecases.read_snapshots import NeedDatabase, Snapshot, Snapshots
from memory_service.usecases.relevance import fused_relevance
from memory_service.usecases.relevance_vectors import Vectors
from servicekit.auth import Identity
from servicekit.db import Database


@dataclass(frozen=True)
class ResponseSize:
    """The bound on a response built from many entries, and what one entry adds to it."""

    max_bytes: int
    measure: Callable[[Item], int]


# How many full-text matches join the fusion: enough to lift exact names and ids, bounded so
# a common word costs the same in a memory of 200 entries as in one of 5,000.
LEXICAL_WINDOW = 50


class MemoryReads:
    """Per call: one query for the head and the clock, then the cached index of that revision,
    ranked in memory; Postgres is asked again only for what no earlier call fetched (the
    revision's index, its vectors, a new query's full-text window, an entry's content)."""

    def __init__(
        self,
        db: Database,
        cache: CandidateCache,
        vectors: Vectors | None,
        budget_link: RemainingTokens | None,
        metrics: ListMetrics,
        default_unit: TokenCounter,
        list_limit_cap: int,
        response_size: ResponseSize,
    ) -> None:
        self._snapshots = Snapshots(db, cache, vectors)
        self._metrics = metrics
        self._cache = cache
        self._vectors = vectors
        self._budget_link = budget_link
        self._default_unit = default_unit
        self._cap = list_limit_cap
        self._response_size = response_size

    async def list_memory(
        self, identity: Identity, query: ListQuery, authorization: str | None = None
    ) -> ListResult:
        relevance = query.rank is Rank.RELEVANCE
        if relevance and self._vectors is None:
            raise relevance_unavailable()
        budget = await self._clamp(query, authorization)
        unit = self._default_unit if query.unit is None else query.unit
        empty = ListResult(unit, query.rank, effective_token_budget=budget)
        if not validate_memory_ref(query.memory_ref):  # reads exactly like an absent memory
            return self._listed(empty)
        vector = None
        if self._vectors is not None and relevance:
            vector = await self._vectors.query(identity.tenant, query.query)
        tags = (query.tag,) if query.tag else ()
        limit = min(query.limit or self._cap, self._cap)

        remembered = (query.rank, query.query if relevance else "", tags, unit, budget, limit)

        async def work(conn: asyncpg.Connection | None, snap: Snapshot) -> ListResult:
            answered = snap.index.listing(remembered, snap.now)
            if isinstance(answered, ListResult):
                return answered
            positions = snap.index.candidates(snap.now, tags)
            order = positions
            if vector is not None:
                order, _ = await self._relevance(conn, snap, positions, vector, query.query, tags)
            chosen = _select(snap.index.ranked(order, unit), budget, limit)
            at = [c.position for c in chosen.selected]
            sizes = [c.size for c in chosen.selected]
            items, fitted = await self._fitting(conn, snap, at, sizes)
            selection = fit_response(chosen, fitted, self._response_size.max_bytes)
            items = items[: len(selection.selected)]
            answer = ListResult(
                unit=unit,
                rank=query.rank,
                revision=snap.revision,
                effective_token_budget=budget,
                entries=items,
                total_tokens=selection.total,
                candidate_count=selection.candidate_count,
                omitted_count=selection.omitted_count,
                first_omitted=selection.first_omitted,
                stopped_by=selection.stopped_by,
            )
            snap.index.remember_listing(remembered, snap.now, answer)
            return answer

        found = await self._snapshots.read(
            identity, query.memory_ref, query.revision, relevance, work
        )
        return self._listed(empty if found is None else found)

    def _listed(self, result: ListResult) -> ListResult:
        self._metrics.listed(
            token_counter=result.unit,
            rank=result.rank.value,
            stopped_by=result.stopped_by.value,
            total=result.total_tokens,
            omitted=result.omitted_count,
            budget=result.effective_token_budget,
        )
        return result

    async def search(self, identity: Identity, query: SearchQuery) -> SearchResult:
        semantic = query.mode is SearchMode.SEMANTIC
        if semantic and self._vectors is None:
            raise relevance_unavailable()
        if not validate_memory_ref(query.memory_ref):
            return SearchResult()
        vector = None
        if self._vectors is not None and semantic:
            vector = await self._vectors.query(identity.tenant, query.query)
        limit = query.limit or DEFAULT_SEARCH_LIMIT

        async def work(conn: asyncpg.Connection | None, snap: Snapshot) -> SearchResult:
            positions = snap.index.candidates(snap.now, query.tags, query.kind)
            if vector is None:  # FILTER: newest first
                order, scores = positions[:limit], np.zeros(min(limit, len(positions)))
            else:
                order, scores = await self._relevance(
                    conn, snap, positions, vector, query.query, query.tags
                )
                order, scores = order[:limit], scores[:limit]
            sizes = snap.index.sizes[self._default_unit][order].tolist()
            items, fitted = await self._fitting(conn, snap, order.tolist(), sizes)
            kept = fitting_count(fitted, self._response_size.max_bytes)
            stopped_by = StoppedBy.SIZE if kept < len(order) else StoppedBy.NONE
            hits = tuple(zip(items[:kept], scores[:kept].tolist(), strict=True))
            return SearchResult(snap.revision, hits, stopped_by)

        found = await self._snapshots.read(
            identity, query.memory_ref, query.revision, semantic, work
        )
        return SearchResult() if found is None else found

    async def _fitting(
        self,
        conn: asyncpg.Connection | None,
        snap: Snapshot,
        positions: Sequence[int],
        sizes: Sequence[int],
    ) -> tuple[tuple[Item, ...], list[int]]:
        """The entries at `positions` (ranked) that may fit in one response, and what each of
        `positions` adds to the response, for the size bound to cut.

        A content has at least as many UTF-8 bytes as code points, so the stored chars size
        bounds an entry's bytes from below: past the first entry whose running bound exceeds
        the limit nothing can fit, and those entries are neither read nor measured (their bound
        stands in for their size). The rest are measured exactly.
        """
        chars = snap.index.sizes[TokenCounter.CHARS]
        bounds = [int(chars[p]) for p in positions]
        possible = fitting_count(bounds, self._response_size.max_bytes)
        rows = [snap.index.rows[p] for p in positions[:possible]]
        items = await _items(conn, snap, rows, sizes[:possible])
        measure = self._response_size.measure
        return items, [measure(i) for i in items] + bounds[possible:]

    async def _clamp(self, query: ListQuery, authorization: str | None) -> int | None:
        """min(token_budget, the run's remaining tokens); the run is asked, never charged."""
        budget = query.token_budget or None
        if not query.run_id:
            return budget
        if self._budget_link is None:
            raise budget_link_unavailable("RATION_MEMORY_BUDGET_ADDRESS is not configured")
        remaining = await self._budget_link.remaining_tokens(query.run_id, authorization)
        if remaining is None:  # the run has no token limit
            return budget
        return remaining if budget is None else min(budget, remaining)

    async def _relevance(
        self,
        conn: asyncpg.Connection | None,
        snap: Snapshot,
        positions: np.ndarray,
        vector: np.ndarray,
        text: str,
        tags: Sequence[str],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The semantic ranking of the candidates at `positions`: (positions, fused scores)."""
        index = snap.index
        assert index.vectors is not None  # loaded by _read before any relevance work
        everything = positions is index.all
        if everything:  # the same candidates, so the same ranking as last time
            ranked = index.ranking(text, tags)
            if ranked is not None:
                return ranked
        lexical = index.lexical_window(text, tags)
        if lexical is None:
            if conn is None:
                raise NeedDatabase
            lexical = await store_candidates.lexical_at(
                conn, snap.key, snap.revision, text, tags, LEXICAL_WINDOW
            )
            index.remember_lexical_window(text, tags, lexical)
        matches = [index.position_of[e] for e in lexical if e in index.position_of]
        found = candidate_numbers(positions, np.array(matches, dtype=np.int64))
        # Scoring the whole matrix needs no copy; a filtered call scores only its candidates.
        vectors = index.vectors if everything else index.vectors[positions]
        order, scores = fused_relevance(vector, vectors, index.id_order(positions), found)
        if everything:
            index.remember_ranking(text, tags, (order, scores))
        return positions[order], scores


def _select(ranked: Sequence[Ranked], budget: int | None, limit: int) -> Selection[Ranked]:
    """select_prefix, plus the one case it cannot express: a run clamp that left 0 tokens."""
    if budget == 0:
        first = ranked[0] if len(ranked) else None
        stopped = StoppedBy.BUDGET if first is not None else StoppedBy.NONE
        return Selection((), 0, len(ranked), len(ranked), first, stopped)
    return select_prefix(ranked, budget, limit)


async def _items(
    conn: asyncpg.Connection | None,
    snap: Snapshot,
    rows: Sequence[CandidateRow],
    sizes: Sequence[int],
) -> tuple[Item, ...]:
    """The returned entries, with content from the index or, the first time, from Postgres."""
    index = snap.index
    missing = [r.entry_version_id for r in rows if r.entry_version_id not in index.contents]
    if missing:
        if conn is None:
            raise NeedDatabase
        index.remember(await store_candidates.contents_of(conn, snap.key, missing))
    return tuple(
        Item(
            entry_id=row.entry_id,
            entry_version_id=row.entry_version_id,
            kind=row.kind,
            content=index.contents[row.entry_version_id].content,
            tags=row.tags,
            created_at=row.created_at,
            size=size,
            metadata=index.contents[row.entry_version_id].metadata,
        )
        for row, size in zip(rows, sizes, strict=True)
    )
