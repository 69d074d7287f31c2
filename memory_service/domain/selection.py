"""ListMemory's injection budget: rank the candidates, then take the prefix that fits (the
token budget, the limit, and the response's size bound)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar


class StoppedBy(enum.StrEnum):
    """Why the walk ended before the last candidate; NONE when nothing was omitted."""

    NONE = "none"
    BUDGET = "budget"
    LIMIT = "limit"
    SIZE = "size"  # the response's byte bound


class SizedCandidate(Protocol):
    @property
    def entry_id(self) -> str: ...

    # Size in the request's unit (o200k_base / cl100k_base tokens or chars), stored at write.
    @property
    def size(self) -> int: ...


class DatedCandidate(Protocol):
    @property
    def entry_id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


@dataclass(frozen=True)
class Candidate:
    """A plain candidate; the service may pass its own row type instead."""

    entry_id: str
    size: int
    created_at: datetime


S = TypeVar("S", bound=SizedCandidate)
D = TypeVar("D", bound=DatedCandidate)


@dataclass(frozen=True)
class Selection(Generic[S]):
    """The answer: a prefix of the ranked candidates, and an account of what was left out."""

    selected: tuple[S, ...]
    total: int  # sum of the selected sizes (total_tokens)
    candidate_count: int
    omitted_count: int  # candidates not returned, whatever the reason
    first_omitted: S | None  # the candidate right after the prefix
    stopped_by: StoppedBy

    @property
    def first_omitted_id(self) -> str | None:
        return None if self.first_omitted is None else self.first_omitted.entry_id

    @property
    def first_omitted_size(self) -> int | None:
        return None if self.first_omitted is None else self.first_omitted.size


def rank_recency(candidates: Iterable[D]) -> list[D]:
    """Newest created_at first; equal timestamps by entry_id ascending (UTF-8 bytes)."""
    # Two stable sorts: the second (by time) keeps the first's id order within equal times.
    ranked = sorted(candidates, key=lambda c: c.entry_id.encode("utf-8"))
    ranked.sort(key=lambda c: c.created_at, reverse=True)
    return ranked


def select_prefix(
    ranked: Sequence[S], token_budget: int | None = None, limit: int | None = None
) -> Selection[S]:
    """Walk the ranked list and stop at the first entry that does not fit.

    Never skips ahead to a smaller entry and never truncates one: an entry larger than the
    whole budget ends the walk, so if it ranks first the answer is empty. `token_budget` and
    `limit` of 0/None mean "no bound"; with both, whichever yields fewer entries wins. When
    both bind at the same entry the limit is reported (it is checked first: the walk never
    needs to size an entry it may not return).
    """
    if token_budget is not None and token_budget < 0:
        raise ValueError("token_budget must be non-negative")
    if limit is not None and limit < 0:
        raise ValueError("limit must be non-negative")
    selected: list[S] = []
    total = 0
    stopped_by = StoppedBy.NONE
    for candidate in ranked:
        if candidate.size < 0:
            raise ValueError(f"negative size for {candidate.entry_id}")
        if limit and len(selected) >= limit:
            stopped_by = StoppedBy.LIMIT
            break
        if token_budget and total + candidate.size > token_budget:
            stopped_by = StoppedBy.BUDGET
            break
        selected.append(candidate)
        total += candidate.size
    returned = len(selected)
    return Selection(
        selected=tuple(selected),
        total=total,
        candidate_count=len(ranked),
        omitted_count=len(ranked) - returned,
        first_omitted=ranked[returned] if returned < len(ranked) else None,
        stopped_by=stopped_by,
    )


def fitting_count(sizes: Iterable[int], max_bytes: int) -> int:
    """How many leading entries fit in `max_bytes` together: the walk stops at the first entry
    that does not fit, never skipping ahead to a smaller one."""
    total = count = 0
    for size in sizes:
        if size < 0:
            raise ValueError("negative response size")
        total += size
        if total > max_bytes:
            break
        count += 1
    return count


def fit_response(selection: Selection[S], sizes: Sequence[int], max_bytes: int) -> Selection[S]:
    """The selection bounded by the response's size too, as one walk checking the size after
    the limit and the budget would end: `sizes[i]` is what the i-th selected entry adds to the
    response. Keeps the longest prefix that fits in `max_bytes`, whole entries only; when that
    cuts, the first entry left out is the first omitted one and the answer reports SIZE."""
    if len(sizes) != len(selection.selected):
        raise ValueError("one response size per selected entry")
    kept = fitting_count(sizes, max_bytes)
    if kept == len(selection.selected):
        return selection
    selected = selection.selected[:kept]
    return Selection(
        selected=selected,
        total=sum(c.size for c in selected),
        candidate_count=selection.candidate_count,
        omitted_count=selection.candidate_count - kept,
        first_omitted=selection.selected[kept],
        stopped_by=StoppedBy.SIZE,
    )
