"""What callers ask of the memory service: write commands and read queries, transport-free."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from memory_service.domain.token_counters import TokenCounter
from servicekit.redaction import Secret


class OrganizeMode(enum.StrEnum):
    DEDUPE = "dedupe"


class Rank(enum.StrEnum):
    """ListMemory's order: newest first, or SearchMemory's semantic ranking."""

    RECENCY = "recency"
    RELEVANCE = "relevance"


class SearchMode(enum.StrEnum):
    SEMANTIC = "semantic"
    FILTER = "filter"


@dataclass(frozen=True)
class EntryDraft:
    """An entry as the caller sent it (before redaction); `entry_id` "" means generate one."""

    content: str
    entry_id: str = ""
    kind: str = ""
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    expires_at: datetime | None = None


@dataclass(frozen=True)
class WriteTarget:
    """What every write names: its idempotency key, the memory, and the head it expects."""

    request_id: str
    memory_ref: str
    expected_revision: int | None = None


@dataclass(frozen=True)
class AppendEntries:
    target: WriteTarget
    entries: tuple[EntryDraft, ...]
    secrets: tuple[Secret, ...] = ()


@dataclass(frozen=True)
class ReviseEntry:
    target: WriteTarget
    entry_id: str
    entry: EntryDraft
    secrets: tuple[Secret, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class ChangeEntryStates:
    """ForgetEntries (deactivate) or ReactivateEntries, by id."""

    target: WriteTarget
    entry_ids: tuple[str, ...]
    reason: str = ""
    secrets: tuple[Secret, ...] = ()


@dataclass(frozen=True)
class OrganizeMemory:
    target: WriteTarget
    # None when the caller sent an unspecified or unknown mode (refused as invalid).
    mode: OrganizeMode | None


@dataclass(frozen=True)
class CompactMemory:
    target: WriteTarget
    dry_run: bool
    limit: int = 0  # 0 = no limit
    reason: str = ""
    secrets: tuple[Secret, ...] = ()


# Every write command; each is redacted in one pass (domain/write_redaction.py) before anything uses
# it.
WriteCommand = AppendEntries | ReviseEntry | ChangeEntryStates | OrganizeMemory | CompactMemory


@dataclass(frozen=True)
class CapacityQuery:
    memory_ref: str
    revision: int | None = None  # None = the head


@dataclass(frozen=True)
class RevisionsQuery:
    """Revisions in (since, through]; through 0 means the head."""

    memory_ref: str
    since: int = 0
    through: int = 0


@dataclass(frozen=True)
class ChangesQuery:
    """The changes of exactly `revision`, or of every revision after `since` (one is set)."""

    memory_ref: str
    revision: int | None = None
    since: int | None = None
    page_size: int = 0  # 0 = the default page
    page_token: str = ""


@dataclass(frozen=True)
class EntryVersionQuery:
    memory_ref: str
    entry_version_id: str


@dataclass(frozen=True)
class CitationQuery:
    memory_ref: str
    revision: int
    entry_id: str
    entry_version_id: str


@dataclass(frozen=True)
class ListQuery:
    """ListMemory. `unit` None means the advertised default; `unknown` names enum fields the
    caller set to values this server does not know (refused as invalid)."""

    memory_ref: str
    limit: int = 0  # 0 = no count limit (the server cap still applies)
    tag: str = ""
    token_budget: int = 0  # 0 = no budget
    unit: TokenCounter | None = None
    rank: Rank = Rank.RECENCY
    query: str = ""
    revision: int | None = None  # None = the head
    run_id: str = ""
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchQuery:
    memory_ref: str
    query: str = ""
    mode: SearchMode | None = None  # None: unspecified or unknown (refused as invalid)
    limit: int = 0  # 0 = the default
    tags: tuple[str, ...] = ()
    kind: str | None = None  # None = any kind
    revision: int | None = None
