"""ListMemory's budgeted prefix walk and recency ranking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_service.selection import Candidate, StoppedBy, rank_recency, select_prefix

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
    result = select_prefix([], token_budget=10, limit=1)
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
