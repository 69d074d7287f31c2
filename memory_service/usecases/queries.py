"""Read use cases: capacity, bounded history, changes, entry versions and citations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from memory_service.domain.capacity import CapacityBudget
from memory_service.domain.change_pages import decode_page_token, encode_page_token
from memory_service.domain.commands import (
    CapacityQuery,
    ChangesQuery,
    CitationQuery,
    EntryVersionQuery,
    RevisionsQuery,
)
from memory_service.domain.compaction import CompactionPolicy, age_cutoff
from memory_service.domain.ids import is_version_id, validate_memory_ref
from memory_service.domain.manifest import EntryState
from memory_service.domain.read_input_rules import DEFAULT_PAGE_SIZE
from memory_service.domain.records import (
    CapacityReport,
    RecordedChange,
    RevisionInfo,
    StoredVersion,
)
from memory_service.domain.refusals import (
    entry_version_not_found,
    history_window_exceeded,
    memory_not_found,
    revision_not_found,
)
from memory_service.domain.write_input_rules import raise_if
from memory_service.store import reads as store_reads
from memory_service.store.writes import MemoryKey
from servicekit.auth import Identity
from servicekit.db import Database
from servicekit.errors import FieldViolation
from servicekit.tenancy import for_tenant

T = TypeVar("T")


@dataclass(frozen=True)
class ChangesPage:
    changes: tuple[RecordedChange, ...]
    next_page_token: str  # "" on the last page


class MemoryQueries:
    """Reads never lock: every answer is about one exact, immutable revision."""

    def __init__(
        self,
        db: Database,
        budget: CapacityBudget,
        compaction: CompactionPolicy,
        max_history_revisions: int,
    ) -> None:
        self._db = db
        self._budget = budget
        self._compaction = compaction
        self._max_history = max_history_revisions

    async def _read(
        self,
        identity: Identity,
        memory_ref: str,
        work: Callable[[asyncpg.Connection, MemoryKey, int], Awaitable[T]],
    ) -> T:
        """Runs `work(conn, key, head)` for this tenant's memory, or MEMORY_NOT_FOUND.

        A malformed ref is answered exactly like an absent or foreign one, without a query.
        """
        if not validate_memory_ref(memory_ref):
            raise memory_not_found()

        async def read(conn: asyncpg.Connection) -> T:
            found = await store_reads.find_head(conn, identity.tenant, memory_ref)
            if found is None:
                raise memory_not_found()
            key, head = found
            return await work(conn, key, head)

        return await for_tenant(self._db, identity.tenant).read(read)

    async def capacity(self, identity: Identity, query: CapacityQuery) -> CapacityReport:

        async def work(conn: asyncpg.Connection, key: MemoryKey, head: int) -> CapacityReport:
            revision = head if query.revision is None else query.revision
            if revision > head:
                raise revision_not_found(revision, head)
            info = await store_reads.revision_info(conn, key, revision)
            if info is None:  # a head row without its revision row: never written that way
                raise AssertionError(f"revision {revision} is missing")
            cutoff = age_cutoff(revision, self._compaction)
            compactable = await store_reads.compactable_count(conn, key, revision, cutoff)
            return CapacityReport(revision, info.usage, compactable, self._budget)

        return await self._read(identity, query.memory_ref, work)

    async def revisions(self, identity: Identity, query: RevisionsQuery) -> list[RevisionInfo]:
        """(since, through] ascending; a window over the limit is refused before any load."""
        since, through = query.since, query.through  # their shape: validate_revisions
        if through and through - since > self._max_history:
            raise history_window_exceeded(through - since, self._max_history)

        async def work(conn: asyncpg.Connection, key: MemoryKey, head: int) -> list[RevisionInfo]:
            upper = through or head
            if upper > head:
                raise_if([FieldViolation("through", f"must be <= the head revision ({head})")])
            if since > upper:
                raise_if([FieldViolation("since", f"must be <= through ({upper})")])
            if upper - since > self._max_history:
                raise history_window_exceeded(upper - since, self._max_history)
            return await store_reads.revisions_between(conn, key, since, upper)

        return await self._read(identity, query.memory_ref, work)

    async def changes(self, identity: Identity, query: ChangesQuery) -> ChangesPage:
        # validate_changes refused any token that does not decode.
        cursor = decode_page_token(query.page_token) if query.page_token else None
        cursor = cursor or (0, "")
        size = query.page_size or DEFAULT_PAGE_SIZE

        async def work(conn: asyncpg.Connection, key: MemoryKey, head: int) -> ChangesPage:
            if query.revision is not None:
                if query.revision > head:
                    raise revision_not_found(query.revision, head)
                since, through = query.revision - 1, query.revision
            else:
                since, through = query.since or 0, head
            rows = await store_reads.changes_after(conn, key, since, through, cursor, size + 1)
            token = ""
            if len(rows) > size:
                last = rows[size - 1]
                token = encode_page_token(last.revision, last.change.entry_id)
            return ChangesPage(tuple(rows[:size]), token)

        return await self._read(identity, query.memory_ref, work)

    async def entry_version(self, identity: Identity, query: EntryVersionQuery) -> StoredVersion:
        async def work(conn: asyncpg.Connection, key: MemoryKey, head: int) -> StoredVersion:
            version = None
            if is_version_id(query.entry_version_id):
                version = await store_reads.entry_version(conn, key, query.entry_version_id)
            if version is None:  # absent, expired, or not an id at all: all read alike
                raise entry_version_not_found()
            return version

        return await self._read(identity, query.memory_ref, work)

    async def validate_citation(
        self, identity: Identity, query: CitationQuery
    ) -> EntryState | None:
        """The cited item's state in exactly that revision; None when the citation is invalid."""

        async def work(conn: asyncpg.Connection, key: MemoryKey, head: int) -> EntryState | None:
            if query.revision > head:
                return None
            return await store_reads.item_state_at(
                conn, key, query.revision, query.entry_id, query.entry_version_id
            )

        return await self._read(identity, query.memory_ref, work)
