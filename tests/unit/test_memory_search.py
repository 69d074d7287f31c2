"""Relevance ranking rules: cosine order, reciprocal rank fusion, deterministic ties."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memory_service.usecases.relevance import (
    cosine_ranking,
    reciprocal_rank_fusion,
    relevance_ranking,
)


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_cosine_ranks_the_closest_first_and_breaks_ties_by_id() -> None:
    query = unit(1, 0)
    vectors = np.stack([unit(0, 1), unit(1, 0.1), unit(0, 1), unit(1, 0)])
    ranked = [e for e, _ in cosine_ranking(query, ["d", "b", "c", "a"], vectors)]
    assert ranked == ["a", "b", "c", "d"]


def test_rrf_rewards_agreement_between_rankings() -> None:
    fused = reciprocal_rank_fusion([["x", "y", "z"], ["y", "w"]])
    assert [e for e, _ in fused] == ["y", "x", "w", "z"]
    fused = reciprocal_rank_fusion([["x", "y", "z"], ["y", "x"]])
    # x and y tie exactly (1/61 + 1/62 each): the tie goes to the smaller id.
    assert [e for e, _ in fused] == ["x", "y", "z"]
    assert abs(dict(fused)["x"] - (1 / 61 + 1 / 62)) < 1e-12


def test_lexical_matches_outside_the_candidates_are_ignored() -> None:
    query = unit(1, 0)
    ranked = relevance_ranking(query, ["a", "b"], np.stack([unit(1, 0), unit(0, 1)]), ["zz", "b"])
    assert {e for e, _ in ranked} == {"a", "b"}


@given(st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True), min_size=1, max_size=3))
def test_rrf_is_deterministic_and_covers_every_ranked_id(rankings: list[list[str]]) -> None:
    fused = reciprocal_rank_fusion(rankings)
    assert fused == reciprocal_rank_fusion([list(r) for r in rankings])
    assert {e for e, _ in fused} == {e for r in rankings for e in r}
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)
