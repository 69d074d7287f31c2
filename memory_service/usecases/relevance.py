"""Relevance ranking: cosine over stored vectors, fused with the lexical rank by RRF (k = 60)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RRF_K = 60


def cosine_ranking(
    query: np.ndarray, entry_ids: Sequence[str], vectors: np.ndarray
) -> list[tuple[str, float]]:
    """Entries by cosine similarity to the query, best first; ties by entry_id bytes.

    Vectors are stored unit-length, so the dot product is the cosine.
    """
    if not entry_ids:
        return []
    scores = vectors @ query
    order = sorted(range(len(entry_ids)), key=lambda i: (-float(scores[i]), entry_ids[i].encode()))
    return [(entry_ids[i], float(scores[i])) for i in order]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], k: int = RRF_K
) -> list[tuple[str, float]]:
    """score(e) = Σ 1 / (k + rank_i(e)) over the rankings e appears in (rank from 1).

    Deterministic: equal scores are ordered by entry_id bytes.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, entry_id in enumerate(ranking, start=1):
            scores[entry_id] = scores.get(entry_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0].encode()))


def relevance_ranking(
    query: np.ndarray,
    entry_ids: Sequence[str],
    vectors: np.ndarray,
    lexical: Sequence[str],
) -> list[tuple[str, float]]:
    """The semantic ranking of every candidate, fused with the lexical matches among them."""
    semantic = [entry_id for entry_id, _ in cosine_ranking(query, entry_ids, vectors)]
    candidates = set(entry_ids)
    return reciprocal_rank_fusion([semantic, [e for e in lexical if e in candidates]])


def fused_relevance(
    query: np.ndarray,
    vectors: np.ndarray,
    id_order: np.ndarray,
    lexical: np.ndarray,
    k: int = RRF_K,
) -> tuple[np.ndarray, np.ndarray]:
    """`relevance_ranking` vectorised: (order, fused scores in that order) over n candidates.

    `vectors` holds the n candidates' vectors, `id_order` their numbers sorted by entry_id
    bytes, and `lexical` candidate numbers in full-text rank order. Sorting stably from the
    entry_id order breaks every tie by entry_id, as the reference does, with the very same
    float operations, so it yields the same order and scores in C time rather than Python's.
    """
    count = len(id_order)
    if count == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    scores = vectors @ query
    semantic = id_order[np.argsort(-scores[id_order], kind="stable")]
    ranks = np.arange(1, count + 1, dtype=np.int64)
    if not len(lexical):  # RRF of one ranking keeps its order; only the scores are needed
        return semantic, 1.0 / (k + ranks).astype(np.float64)
    rank = np.empty(count, dtype=np.int64)
    rank[semantic] = ranks
    fused = 1.0 / (k + rank).astype(np.float64)
    fused[lexical] += 1.0 / (k + ranks[: len(lexical)]).astype(np.float64)
    order = id_order[np.argsort(-fused[id_order], kind="stable")]
    return order, fused[order]
