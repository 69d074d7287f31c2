"""The candidate index of one revision: what ListMemory and SearchMemory rank, without content."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, NamedTuple, TypeVar, overload

import numpy as np

from memory_service.domain.selection import rank_recency
from memory_service.domain.token_counters import TokenCounter

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_NEVER = np.iinfo(np.int64).max
_EMPTY = np.zeros(0, dtype=np.int64)
# Weight is in units of about 1 KiB of process memory: a candidate row (its ids, tags, sizes
# and index entries as Python objects) is one, its vector (384 float32, 1.5 KiB) two more, and
# cached content one per started 1,024 characters.
VECTOR_WEIGHT = 2
CONTENT_UNIT_CHARS = 1024
# Per revision, by (query, tags): full-text windows and whole relevance rankings, because
# orchestrators repeat their queries (the task prompt every turn). A ranking is 16 bytes a row.
LEXICAL_WINDOWS = 64
RANKINGS = 8
# Whole ListMemory answers by their parameters: an orchestrator asks the same question every
# turn, and between writes the revision (and so the answer) does not change.
LISTINGS = 16

V = TypeVar("V")
MemoKey = Hashable  # the parameters a remembered result was computed for


class _Memo(Generic[V]):
    """A small LRU of results that depend on the revision alone, with their weights."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._found: OrderedDict[MemoKey, tuple[V, int]] = OrderedDict()
        self.weight = 0

    def get(self, key: MemoKey) -> V | None:
        found = self._found.get(key)
        if found is None:
            return None
        self._found.move_to_end(key)
        return found[0]

    def put(self, key: MemoKey, value: V, weight: int) -> None:
        """Remembers `value` for `key`, replacing what was there (e.g. an answer gone stale)."""
        replaced = self._found.pop(key, None)
        if replaced is not None:
            self.weight -= replaced[1]
        self._found[key] = (value, weight)
        self.weight += weight
        if len(self._found) > self._size:
            _, (_, dropped) = self._found.popitem(last=False)
            self.weight -= dropped


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: exact, so expiry compares exactly like Postgres does."""
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class CandidateRow:
    """An active manifest item of a revision, with what ranking and filtering need."""

    entry_id: str
    entry_version_id: str
    kind: str
    tags: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    sizes: Mapping[TokenCounter, int]


@dataclass(frozen=True)
class Content:
    """What the index does not need to rank, fetched when an entry is first returned."""

    content: str
    metadata: Mapping[str, str]


class Ranked(NamedTuple):
    """One candidate as the budget walk sees it: its id and its size in the request's unit.

    A named tuple rather than a dataclass: one is built per entry walked, on every call.
    """

    entry_id: str
    size: int
    position: int  # its row in the index


class CandidateIndex:
    """The active items of one revision, newest first, as arrays.

    Rows are stored in recency order (newest created_at first, ties by entry_id bytes), so a
    row's position is its recency rank and filtering keeps that order for free. Everything here
    describes immutable data, so what is filled in later (the vectors, once relevance needs
    them; contents and full-text windows as calls need them) never goes stale.
    """

    def __init__(self, rows: Sequence[CandidateRow]) -> None:
        self.rows: tuple[CandidateRow, ...] = tuple(rank_recency(rows))
        count = len(self.rows)
        self.all = np.arange(count, dtype=np.int64)
        self.sizes = {
            unit: np.fromiter((r.sizes[unit] for r in self.rows), np.int64, count)
            for unit in TokenCounter
        }
        expiries = [micros(r.expires_at) if r.expires_at else _NEVER for r in self.rows]
        self._expires = np.array(expiries, dtype=np.int64)
        self._earliest_expiry = min(expiries, default=_NEVER)
        # Positions in entry_id byte order, and each position's place in it: the deterministic
        # tie-break of every ranking.
        self.by_id = np.array(
            sorted(range(count), key=lambda i: self.rows[i].entry_id.encode()), dtype=np.int64
        )
        self.id_rank = np.empty(count, dtype=np.int64)
        self.id_rank[self.by_id] = self.all
        self.position_of = {row.entry_id: i for i, row in enumerate(self.rows)}
        self._versions = frozenset(row.entry_version_id for row in self.rows)
        self._by_tag = _positions_by(((i, t) for i, r in enumerate(self.rows) for t in r.tags))
        self._by_kind = _positions_by(((i, r.kind) for i, r in enumerate(self.rows)))
        self.vectors: np.ndarray | None = None
        self.contents: dict[str, Content] = {}  # by entry_version_id
        self._content_weight = 0
        self._lexical: _Memo[list[str]] = _Memo(LEXICAL_WINDOWS)
        self._rankings: _Memo[tuple[np.ndarray, np.ndarray]] = _Memo(RANKINGS)
        self._listings: _Memo[tuple[object, int]] = _Memo(LISTINGS)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def weight(self) -> int:
        """What this index counts against the cache bound (at least 1, even when empty)."""
        rows = len(self.rows) * (1 + (VECTOR_WEIGHT if self.vectors is not None else 0))
        memos = self._lexical.weight + self._rankings.weight + self._listings.weight
        return max(1, rows + self._content_weight + memos)

    def remember(self, contents: Mapping[str, Content]) -> None:
        """Keeps the contents of this index's versions (others are ignored)."""
        for version_id, content in contents.items():
            if version_id in self._versions and version_id not in self.contents:
                self.contents[version_id] = content
                self._content_weight += 1 + len(content.content) // CONTENT_UNIT_CHARS

    def lexical_window(self, query: str, tags: Sequence[str]) -> list[str] | None:
        return self._lexical.get((query, tuple(tags)))

    def remember_lexical_window(self, query: str, tags: Sequence[str], ids: list[str]) -> None:
        self._lexical.put((query, tuple(tags)), ids, 1)

    def ranking(self, query: str, tags: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """The relevance ranking of the whole index (nothing filtered out) for this query."""
        return self._rankings.get((query, tuple(tags)))

    def remember_ranking(
        self, query: str, tags: Sequence[str], ranking: tuple[np.ndarray, np.ndarray]
    ) -> None:
        self._rankings.put((query, tuple(tags)), ranking, 1 + len(self.rows) * 16 // 1024)

    def listing(self, key: MemoKey, now: datetime) -> object | None:
        """An answer remembered for these parameters, if no row has expired since it was made.

        The rows, their sizes, contents and rankings never change; the clock only removes rows
        as they expire. So an answer stays exact until the earliest expiry after its making.
        """
        found = self._listings.get(key)
        if found is None:
            return None
        answer, valid_until = found
        return answer if micros(now) < valid_until else None

    def remember_listing(self, key: MemoKey, now: datetime, answer: object) -> None:
        now_us = micros(now)
        later = self._expires[self._expires > now_us]
        valid_until = int(later.min()) if len(later) else _NEVER
        self._listings.put(key, (answer, valid_until), 1)

    def candidates(
        self, now: datetime, tags: Sequence[str] = (), kind: str | None = None
    ) -> np.ndarray:
        """Positions (ascending, i.e. newest first) of the unexpired rows matching every filter.

        Without filters and with nothing expired yet, this is the whole index at no cost.
        """
        chosen: np.ndarray | None = None
        for tag in dict.fromkeys(tags):
            chosen = _intersect(chosen, self._by_tag.get(tag, _EMPTY))
        if kind is not None:
            chosen = _intersect(chosen, self._by_kind.get(kind, _EMPTY))
        now_us = micros(now)
        if self._earliest_expiry <= now_us:
            alive = self._expires > now_us
            chosen = np.flatnonzero(alive) if chosen is None else chosen[alive[chosen]]
        return self.all if chosen is None else chosen

    def id_order(self, positions: np.ndarray) -> np.ndarray:
        """Candidate numbers (indexes into `positions`) sorted by entry_id bytes."""
        if positions is self.all:
            return self.by_id
        found: np.ndarray = np.argsort(self.id_rank[positions], kind="stable")
        return found

    def ranked(self, order: np.ndarray, unit: TokenCounter) -> RankedCandidates:
        return RankedCandidates(self, order, unit)


def _positions_by(pairs: Iterator[tuple[int, str]]) -> dict[str, np.ndarray]:
    grouped: dict[str, list[int]] = {}
    for position, key in pairs:
        grouped.setdefault(key, []).append(position)
    return {key: np.array(found, dtype=np.int64) for key, found in grouped.items()}


def _intersect(chosen: np.ndarray | None, positions: np.ndarray) -> np.ndarray:
    if chosen is None:
        return positions
    return np.intersect1d(chosen, positions, assume_unique=True)


def candidate_numbers(positions: np.ndarray, matches: np.ndarray) -> np.ndarray:
    """For index positions `matches` (in rank order), their numbers among the ascending
    candidate `positions`, dropping those that are not candidates (order kept)."""
    if not len(positions) or not len(matches):
        return matches[:0]
    slots = np.searchsorted(positions, matches)
    inside = slots < len(positions)
    kept = inside & (positions[np.where(inside, slots, 0)] == matches)
    found: np.ndarray = slots[kept]
    return found


class RankedCandidates(Sequence[Ranked]):
    """A ranking as select_prefix walks it: its length is the candidate count, and items are
    built only as the walk reaches them, so a walk costs the prefix it takes, not the memory."""

    def __init__(self, index: CandidateIndex, order: np.ndarray, unit: TokenCounter) -> None:
        self._index = index
        self._order = order
        self._sizes = index.sizes[unit]

    def __len__(self) -> int:
        return len(self._order)

    def _item(self, position: int) -> Ranked:
        return Ranked(self._index.rows[position].entry_id, int(self._sizes[position]), position)

    @overload
    def __getitem__(self, at: int) -> Ranked: ...
    @overload
    def __getitem__(self, at: slice) -> Sequence[Ranked]: ...
    def __getitem__(self, at: int | slice) -> Ranked | Sequence[Ranked]:
        if isinstance(at, slice):
            return [self._item(int(p)) for p in self._order[at]]
        return self._item(int(self._order[at]))

    def __iter__(self) -> Iterator[Ranked]:
        # In growing chunks of plain ints: a walk usually stops within the first few dozen.
        start, step = 0, 32
        while start < len(self._order):
            for position in self._order[start : start + step].tolist():
                yield self._item(position)
            start, step = start + step, step * 4
