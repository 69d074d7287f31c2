"""The candidate index, its cache, and the vectorised relevance ranking (pure, no I/O)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.domain.candidate_index import (
    RANKINGS,
    VECTOR_WEIGHT,
    CandidateIndex,
    CandidateRow,
)
from memory_service.domain.selection import StoppedBy, rank_recency, select_prefix
from memory_service.domain.token_counters import TokenCounter
from memory_service.usecases.candidate_cache import CandidateCache
from memory_service.usecases.relevance import fused_relevance, relevance_ranking

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(
    entry_id: str,
    seconds: int,
    size: int = 10,
    tags: tuple[str, ...] = (),
    kind: str = "",
    expires: datetime | None = None,
) -> CandidateRow:
    return CandidateRow(
        entry_id=entry_id,
        entry_version_id="v-" + entry_id,
        kind=kind,
        tags=tags,
        created_at=T0 + timedelta(seconds=seconds),
        expires_at=expires,
        sizes={
            TokenCounter.O200K_BASE: size,
            TokenCounter.CL100K_BASE: size + 1,
            TokenCounter.CHARS: 4 * size,
        },
    )


def ids(index: CandidateIndex, positions: np.ndarray) -> list[str]:
    return [index.rows[int(p)].entry_id for p in positions]


def test_rows_are_kept_newest_first_with_ties_by_entry_id_bytes() -> None:
    rows = [row("b", 1), row("a", 1), row("c", 2), row("é", 0), row("Z", 1)]
    index = CandidateIndex(rows)
    assert ids(index, index.all) == [r.entry_id for r in rank_recency(rows)]
    assert ids(index, index.all) == ["c", "Z", "a", "b", "é"]


def test_filters_intersect_and_keep_the_order() -> None:
    index = CandidateIndex(
        [
            row("a", 5, tags=("x", "y"), kind="fact"),
            row("b", 4, tags=("x",), kind="pref"),
            row("c", 3, tags=("y",), kind="fact"),
            row("d", 2, tags=("x", "y"), kind="pref"),
        ]
    )
    now = T0
    assert index.candidates(now) is index.all  # the common case costs nothing
    assert ids(index, index.candidates(now, ("x",))) == ["a", "b", "d"]
    assert ids(index, index.candidates(now, ("x", "y"))) == ["a", "d"]
    assert ids(index, index.candidates(now, ("x",), "pref")) == ["b", "d"]
    assert ids(index, index.candidates(now, ("missing",))) == []
    assert ids(index, index.candidates(now, (), "fact")) == ["a", "c"]


def test_an_index_built_before_entries_expire_drops_them_once_the_clock_passes() -> None:
    expiry = T0 + timedelta(minutes=5)
    index = CandidateIndex([row("a", 3), row("b", 2, expires=expiry), row("c", 1, tags=("t",))])
    assert ids(index, index.candidates(expiry - timedelta(microseconds=1))) == ["a", "b", "c"]
    # Expired means expires_at <= now, exactly as the SQL `expires_at > now()` keeps rows.
    assert ids(index, index.candidates(expiry)) == ["a", "c"]
    assert ids(index, index.candidates(expiry + timedelta(days=1), ("t",))) == ["c"]


def test_the_walk_reads_only_the_prefix_it_takes() -> None:
    index = CandidateIndex([row(f"e{i:04d}", -i, size=100) for i in range(5000)])
    ranked = index.ranked(index.all, TokenCounter.O200K_BASE)
    selection = select_prefix(ranked, token_budget=250)
    assert [c.entry_id for c in selection.selected] == ["e0000", "e0001"]
    assert (selection.total, selection.candidate_count, selection.omitted_count) == (
        200,
        5000,
        4998,
    )
    assert selection.first_omitted is not None
    assert selection.first_omitted.entry_id == "e0002"
    assert selection.stopped_by is StoppedBy.BUDGET
    assert index.ranked(index.all, TokenCounter.CHARS)[0].size == 400


def test_weight_counts_rows_and_vectors() -> None:
    index = CandidateIndex([row("a", 1), row("b", 2)])
    assert index.weight == 2
    index.vectors = np.zeros((2, 4), dtype=np.float32)
    assert index.weight == 2 * (1 + VECTOR_WEIGHT)
    assert CandidateIndex([]).weight == 1


def _unit_rows(rng: np.random.Generator, count: int, dims: int) -> np.ndarray:
    vectors = rng.normal(size=(count, dims)).astype(np.float32)
    # Duplicate some rows so cosine ties happen and the entry_id tie-break matters.
    if count:
        vectors[1::3] = vectors[0]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / norms).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
    lexical_count=st.integers(0, 8),
    subset=st.booleans(),
)
def test_fused_relevance_equals_the_reference_ranking(
    count: int, seed: int, lexical_count: int, subset: bool
) -> None:
    rng = np.random.default_rng(seed)
    entry_ids = [uuid.UUID(int=int(rng.integers(0, 2**62))).hex for _ in range(count)]
    entry_ids = list(dict.fromkeys(entry_ids))
    count = len(entry_ids)
    index = CandidateIndex([row(e, int(rng.integers(0, 5))) for e in entry_ids])
    index.vectors = _unit_rows(rng, count, 8)
    positions = index.all
    if subset and count:
        positions = np.flatnonzero(rng.random(count) < 0.6)
    query = _unit_rows(rng, 1, 8)[0]
    everything = [index.rows[i].entry_id for i in range(count)]
    lexical = list(rng.permutation(everything))[:lexical_count] + ["not-a-candidate"]
    chosen = [everything[int(p)] for p in positions]
    vectors = index.vectors[positions]
    expected = relevance_ranking(query, chosen, vectors, lexical)
    numbers = {e: i for i, e in enumerate(chosen)}
    found = np.array([numbers[e] for e in lexical if e in numbers], dtype=np.int64)
    order, scores = fused_relevance(query, vectors, index.id_order(positions), found)
    assert [(chosen[int(i)], float(s)) for i, s in zip(order, scores, strict=True)] == expected


async def test_the_cache_builds_once_for_concurrent_misses_and_evicts_by_weight() -> None:
    builds: list[int] = []

    async def build(revision: int) -> CandidateIndex:
        builds.append(revision)
        await asyncio.sleep(0)  # let the other callers arrive while this build runs
        return CandidateIndex([row(f"r{revision}-{i}", i) for i in range(10)])

    cache = CandidateCache(max_weight=25)
    memory = uuid.uuid4()
    key = ("t", memory, 1)
    first = await asyncio.gather(*(cache.get(key, lambda: build(1)) for _ in range(5)))
    assert builds == [1]
    assert all(index is first[0] for index in first)
    await cache.get(("t", memory, 2), lambda: build(2))
    assert (len(cache), cache.weight) == (2, 20)
    await cache.get(("t", memory, 1), lambda: build(1))  # a hit: revision 1 is now the newest
    await cache.get(("t", memory, 3), lambda: build(3))  # evicts revision 2
    assert builds == [1, 2, 3]
    assert cache.weight == 20
    await cache.get(("t", memory, 1), lambda: build(1))
    assert builds == [1, 2, 3]
    first[0].vectors = np.zeros((10, 2), dtype=np.float32)
    cache.reweigh(key)  # 40 > 25: both go, the grown one last
    assert len(cache) == 0
    assert cache.weight == 0


async def test_a_failed_build_is_not_cached_and_its_waiters_build_again() -> None:
    cache = CandidateCache(max_weight=100)
    key = ("t", uuid.uuid4(), 1)
    calls = 0

    async def build() -> CandidateIndex:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            raise ConnectionError("the store went away")
        return CandidateIndex([row("a", 1)])

    results = await asyncio.gather(
        *(cache.get(key, build) for _ in range(3)), return_exceptions=True
    )
    assert isinstance(results[0], ConnectionError)
    assert all(isinstance(r, CandidateIndex) for r in results[1:])
    assert calls == 2


def test_an_index_larger_than_the_cache_is_served_but_not_kept() -> None:
    cache = CandidateCache(max_weight=5)

    async def build() -> CandidateIndex:
        return CandidateIndex([row(f"e{i}", i) for i in range(10)])

    index = asyncio.run(cache.get(("t", uuid.uuid4(), 1), build))
    assert len(index) == 10
    assert len(cache) == 0


@pytest.mark.parametrize("unit", list(TokenCounter))
def test_sizes_follow_the_requested_unit(unit: TokenCounter) -> None:
    index = CandidateIndex([row("a", 1, size=7)])
    assert (
        index.ranked(index.all, unit)[0].size
        == {"o200k_base": 7, "cl100k_base": 8, "chars": 28}[unit.value]
    )


def test_memoised_windows_and_rankings_are_bounded_and_weighed() -> None:
    index = CandidateIndex([row(f"e{i}", i) for i in range(2048)])
    base = index.weight
    order = (index.all, np.zeros(len(index)))
    for n in range(RANKINGS + 3):
        index.remember_ranking(f"q{n}", (), order)
        index.remember_lexical_window(f"q{n}", ("t",), ["e1"])
    assert index.ranking("q0", ()) is None  # the oldest went first
    assert index.ranking(f"q{RANKINGS + 2}", ()) is order
    assert index.lexical_window("q0", ("t",)) == ["e1"]
    assert index.lexical_window("q0", ()) is None
    assert index.weight == base + RANKINGS * (1 + 2048 * 16 // 1024) + (RANKINGS + 3)


def test_a_remembered_listing_lasts_until_the_next_expiry_and_no_longer() -> None:
    made = datetime(2030, 1, 1, tzinfo=UTC)
    first, second = made + timedelta(seconds=5), made + timedelta(seconds=9)
    index = CandidateIndex([row("a", 3), row("b", 2, expires=first), row("c", 1, expires=second)])
    key = ("recency", "", (), TokenCounter.CHARS, 800, 10)
    index.remember_listing(key, made, "answer")
    assert index.listing(key, made + timedelta(seconds=4.999999)) == "answer"
    assert index.listing(key, first) is None  # b expires at `first`: the answer changed
    assert index.listing(("recency", "", (), TokenCounter.CHARS, 800, 11), made) is None
    index.remember_listing(key, first, "after b")  # made once b is gone: until c expires
    assert index.listing(key, second - timedelta(microseconds=1)) == "after b"
    assert index.listing(key, second) is None
    lasting = CandidateIndex([row("a", 1)])
    lasting.remember_listing(key, made, "forever")
    assert lasting.listing(key, made + timedelta(days=3650)) == "forever"
