"""Plain records of stored memory: heads, items, versions, revisions, capacity, read results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from memory_service.domain.candidate_index import Ranked
from memory_service.domain.capacity import CapacityBudget, Dimension, Usage, exceeded
from memory_service.domain.commands import Rank
from memory_service.domain.manifest import Change, EntryState
from memory_service.domain.selection import StoppedBy
from memory_service.domain.token_counters import TokenCounter


@dataclass(frozen=True)
class Head:
    """A memory's head revision as the write path reads it under the memory's row lock.

    `memory_id` is None only in plans built without storage (tests); revision 0 is a memory
    whose first write is in progress.
    """

    memory_id: UUID | None
    revision: int
    active_count: int
    inactive_count: int
    manifest_bytes: int

    @property
    def usage(self) -> Usage:
        return Usage(
            active_entries=self.active_count,
            manifest_entries=self.active_count + self.inactive_count,
            manifest_bytes=self.manifest_bytes,
        )


@dataclass(frozen=True)
class HeadItem:
    """An item of the head manifest with what the write path needs to change it."""

    entry_id: str
    entry_version_id: str
    entry_content_hash: str
    state: EntryState
    has_tags: bool
    last_state_change_revision: int
    # Of the item's entry version: revise numbers the next one; dedupe keeps the earliest.
    version: int
    created_in_revision: int


@dataclass(frozen=True)
class StoredVersion:
    """An immutable entry version; `content` (and every text field) is already redacted."""

    entry_id: str
    entry_version_id: str
    version: int
    previous_version_id: str | None
    kind: str
    content: str
    tags: tuple[str, ...]
    metadata: Mapping[str, str]
    content_hash: str
    created_in_revision: int
    created_at: datetime
    expires_at: datetime | None
    sizes: Mapping[TokenCounter, int]


@dataclass(frozen=True)
class RevisionInfo:
    """One revision's summary row: its counts and canonical bytes are stored, never recomputed."""

    revision: int
    created_at: datetime
    operation: str
    change_count: int
    active_count: int
    inactive_count: int
    manifest_bytes: int

    @property
    def usage(self) -> Usage:
        return Usage(
            active_entries=self.active_count,
            manifest_entries=self.active_count + self.inactive_count,
            manifest_bytes=self.manifest_bytes,
        )


@dataclass(frozen=True)
class RecordedChange:
    """A change as history reads return it: the revision that recorded it, and the change."""

    revision: int
    change: Change


@dataclass(frozen=True)
class CapacityReport:
    """GetCapacity: the usage of one exact revision against the configured budget."""

    revision: int
    usage: Usage
    compactable_entry_count: int
    budget: CapacityBudget

    @property
    def exceeded(self) -> list[Dimension]:
        return exceeded(self.usage, self.budget)


class Item(NamedTuple):
    """An entry as ListMemory and SearchMemory return it (content redacted at write); a named
    tuple, built per returned entry on every call, as cheaply as an immutable record gets."""

    entry_id: str
    entry_version_id: str
    kind: str
    content: str
    tags: tuple[str, ...]
    created_at: datetime
    size: int
    metadata: Mapping[str, str]


@dataclass(frozen=True)
class ListResult:
    """ListMemory's answer: the ranked prefix that fit, and an account of what did not."""

    unit: TokenCounter
    rank: Rank
    revision: int = 0  # 0: no such memory (or another tenant's, or a malformed ref)
    effective_token_budget: int | None = None  # after the run clamp; None = no budget
    entries: tuple[Item, ...] = ()
    total_tokens: int = 0
    candidate_count: int = 0
    omitted_count: int = 0
    first_omitted: Ranked | None = None
    stopped_by: StoppedBy = StoppedBy.NONE


@dataclass(frozen=True)
class SearchResult:
    revision: int = 0
    hits: tuple[tuple[Item, float], ...] = ()
    stopped_by: StoppedBy = StoppedBy.NONE  # SIZE: more hits matched than fit one response
