"""ListMemory's budgeted prefix walk and recency ranking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_service.domain.selection import (
    Candidate,
    StoppedBy,
    fit_response,
    fitting_count,
    rank_recency,
    select_prefix,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entries(*sizes: int) -> list[Candidate]:
    """Candidates written oldest to newest, one minute apart."""
    return [
        Candidate(f"mem_ent_{index:032x}", size, T0 + timedelta(minutes=index))
        for index, size in enumerate(sizes)
    ]


def test_acceptance_budget_800_returns_newest_prefix_that_fits() -> None:
    oldest_first = entries(1000, 240, 240, 240, 102)
    result = select_prefix(rank_recency(oldest_first), token_budget=800)
    assert [c.size for c in result.selected] == [102, 240, 240]
    assert [c.entry_id for c in result.selected] == [c.entry_id for c in oldest_first[:1:-1]]
    assert result.total == 582
    assert result.stopped_by is StoppedBy.BUDGET
    assert result.candidate_count == 5
    assert result.omitted_count == 2
    assert result.first_omitted_id == oldest_first[1].entry_id
    assert result.first_omitted_size == 240


def test_acceptance_single_oversized_entry_yields_nothing_and_is_not_truncated() -> None:
    result = select_prefix(rank_recency(entries(1000)), token_budget=800)
    assert result.selected == ()
    assert result.total == 0
    assert result.omitted_count == 1
    assert result.first_omitted_size == 1000
    assert result.stopped_by is StoppedBy.BUDGET


def test_walk_never_skips_ahead_to_a_smaller_entry() -> None:
    result = select_prefix(entries(10, 500, 1), token_budget=100)
    assert [c.size for c in result.selected] == [10]
    assert result.first_omitted_size == 500


def test_no_budget_and_no_limit_returns_everything() -> None:
    for budget in (None, 0):
        result = select_prefix(entries(5, 7, 9), token_budget=budget, limit=0)
        assert result.total == 21
        assert result.stopped_by is StoppedBy.NONE
        assert result.omitted_count == 0
        assert result.first_omitted is None


def test_limit_wins_when_it_yields_fewer() -> None:
    result = select_prefix(entries(10, 10, 10, 10), token_budget=35, limit=2)
    assert len(result.selected) == 2
    assert result.stopped_by is StoppedBy.LIMIT
    assert result.omitted_count == 2


def test_budget_wins_when_it_yields_fewer() -> None:
    result = select_prefix(entries(10, 10, 10, 10), token_budget=25, limit=3)
    assert len(result.selected) == 2
    assert result.stopped_by is StoppedBy.BUDGET


def test_limit_is_reported_when_both_bind_at_the_same_entry() -> None:
    result = select_prefix(entries(10, 10, 10), token_budget=20, limit=2)
    assert result.stopped_by is StoppedBy.LIMIT


def test_exact_fit_and_exhausted_candidates_stop_by_none() -> None:
    result = select_prefix(entries(10, 10), token_budget=20, limit=2)
    assert result.total == 20
    assert result.stopped_by is StoppedBy.NONE


def test_empty_candidates() -> None:
    result = select_prefix(list[Candidate](), token_budget=10, limit=1)
    assert (result.selected, result.candidate_count, result.omitted_count) == ((), 0, 0)
    assert result.stopped_by is StoppedBy.NONE


def test_negative_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="token_budget"):
        select_prefix(entries(1), token_budget=-1)
    with pytest.raises(ValueError, match="limit"):
        select_prefix(entries(1), limit=-1)
    with pytest.raises(ValueError, match="negative size"):
        select_prefix(entries(-1))


def test_recency_is_newest_first_with_ties_by_entry_id_bytes() -> None:
    a = Candidate("mem_ent_" + "a" * 32, 1, T0)
    b = Candidate("mem_ent_" + "b" * 32, 1, T0)
    newer = Candidate("mem_ent_" + "0" * 32, 1, T0 + timedelta(seconds=1))
    assert rank_recency([b, a, newer]) == [newer, a, b]
    assert rank_recency([a, newer, b]) == [newer, a, b]


sizes = st.lists(st.integers(0, 300), max_size=30)
budgets = st.none() | st.integers(0, 1500)
limits = st.none() | st.integers(0, 12)


@given(sizes, budgets, limits)
def test_selection_is_the_longest_prefix_within_budget_and_limit(
    sizes: list[int], budget: int | None, limit: int | None
) -> None:
    ranked = entries(*sizes)
    result = select_prefix(ranked, token_budget=budget, limit=limit)
    n = len(result.selected)
    assert list(result.selected) == ranked[:n]  # a prefix, whole entries only
    assert result.total == sum(c.size for c in result.selected)
    if budget:
        assert result.total <= budget
    if limit:
        assert n <= limit
    assert result.candidate_count == len(ranked)
    assert result.omitted_count == len(ranked) - n
    if n == len(ranked):
        assert result.stopped_by is StoppedBy.NONE
        assert result.first_omitted is None
    else:
        assert result.first_omitted is ranked[n]
        if result.stopped_by is StoppedBy.LIMIT:
            assert n == limit
        else:
            assert result.stopped_by is StoppedBy.BUDGET
            assert budget
            assert result.total + ranked[n].size > budget  # the next entry would not fit


@given(sizes, budgets, limits)
def test_with_both_bounds_the_smaller_answer_wins(
    sizes: list[int], budget: int | None, limit: int | None
) -> None:
    ranked = entries(*sizes)
    both = select_prefix(ranked, token_budget=budget, limit=limit)
    by_budget = select_prefix(ranked, token_budget=budget)
    by_limit = select_prefix(ranked, limit=limit)
    assert len(both.selected) == min(len(by_budget.selected), len(by_limit.selected))


def test_the_size_bound_stops_at_the_first_entry_that_does_not_fit_whole_entries_only() -> None:
    ranked = rank_recency(entries(10, 10, 10, 10, 10))  # sizes in tokens
    chosen = select_prefix(ranked)
    # Response bytes per entry, in rank order: the third would take 300 + 500 over 700, and the
    # smaller fourth is not taken in its place.
    result = fit_response(chosen, [100, 200, 500, 50, 50], 700)
    assert result.selected == tuple(ranked[:2])
    assert result.total == 20
    assert result.stopped_by is StoppedBy.SIZE
    assert (result.candidate_count, result.omitted_count) == (5, 3)
    assert result.first_omitted == ranked[2]


def test_an_answer_that_fits_the_size_bound_is_unchanged() -> None:
    chosen = select_prefix(rank_recency(entries(5, 5, 5)), token_budget=10)
    assert fit_response(chosen, [300, 400], 700) is chosen
    assert chosen.stopped_by is StoppedBy.BUDGET


def test_a_first_entry_larger_than_the_size_bound_gives_an_empty_answer() -> None:
    ranked = rank_recency(entries(1, 1))
    result = fit_response(select_prefix(ranked), [701, 1], 700)
    assert (result.selected, result.total, result.omitted_count) == ((), 0, 2)
    assert (result.first_omitted, result.stopped_by) == (ranked[0], StoppedBy.SIZE)


def test_fitting_count_is_the_longest_prefix_within_the_bound() -> None:
    assert fitting_count([], 0) == 0
    assert fitting_count([0, 0], 0) == 2
    assert fitting_count([3, 4, 1], 7) == 2
    assert fitting_count([3, 4, 1], 8) == 3
    assert fitting_count([8, 1], 7) == 0
    with pytest.raises(ValueError, match="negative"):
        fitting_count([1, -1], 7)


def _one_walk(
    sizes: list[int], wire: list[int], budget: int, limit: int, max_bytes: int
) -> tuple[int, StoppedBy]:
    """The rule as one walk checking limit, then budget, then response size at each entry."""
    taken = tokens = size = 0
    for token_size, wire_size in zip(sizes, wire, strict=True):
        if limit and taken >= limit:
            return taken, StoppedBy.LIMIT
        if budget and tokens + token_size > budget:
            return taken, StoppedBy.BUDGET
        if size + wire_size > max_bytes:
            return taken, StoppedBy.SIZE
        taken, tokens, size = taken + 1, tokens + token_size, size + wire_size
    return taken, StoppedBy.NONE


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400)), max_size=30),
    st.integers(0, 400),
    st.integers(0, 12),
    st.integers(0, 2000),
)
def test_budget_limit_then_size_is_the_same_as_one_walk_checking_all_three(
    rows: list[tuple[int, int]], budget: int, limit: int, max_bytes: int
) -> None:
    sizes, wire = [r[0] for r in rows], [r[1] for r in rows]
    ranked = rank_recency(entries(*sizes))
    by_id = {c.entry_id: index for index, c in enumerate(entries(*sizes))}
    ordered_wire = [wire[by_id[c.entry_id]] for c in ranked]
    chosen = select_prefix(ranked, token_budget=budget, limit=limit)
    result = fit_response(chosen, ordered_wire[: len(chosen.selected)], max_bytes)
    taken, stopped_by = _one_walk([c.size for c in ranked], ordered_wire, budget, limit, max_bytes)
    assert result.selected == tuple(ranked[:taken])
    assert result.stopped_by is stopped_by
    assert result.total == sum(c.size for c in ranked[:taken])
    assert result.omitted_count == len(ranked) - taken
    assert result.first_omitted == (ranked[taken] if taken < len(ranked) else None)
