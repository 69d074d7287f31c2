"""Entries made ready to store: the command's SR-1 pass first, then ids, hash, sizes, embedding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Generic, TypeVar

from memory_service.adapters.embedder import Embedder, to_bytes
from memory_service.adapters.tokenizer import Tokenizer
from memory_service.domain.commands import AppendEntries, EntryDraft, ReviseEntry
from memory_service.domain.ids import new_entry_id, new_version_id
from memory_service.domain.manifest import content_hash
from memory_service.domain.token_counters import TokenCounter
from memory_service.domain.write_input_rules import InputLimits, raise_if, validate_stored
from memory_service.domain.write_redaction import RedactedWrite, merge_redacted, redact_write


@dataclass(frozen=True)
class PreparedEntry:
    """An entry version's content as it will be stored: redacted, hashed and sized."""

    entry_id: str
    entry_version_id: str
    kind: str
    content: str
    tags: tuple[str, ...]
    metadata: Mapping[str, str]
    content_hash: str
    expires_at: datetime | None
    sizes: Mapping[TokenCounter, int]
    # float32 sentence vector of the redacted content; None when written without an embedder.
    embedding: bytes | None = None


P = TypeVar("P", AppendEntries, ReviseEntry)


@dataclass(frozen=True)
class Prepared(Generic[P]):
    # The command as redacted (what is fingerprinted and stored), with its redaction counts.
    redacted: RedactedWrite[P]
    entries: tuple[PreparedEntry, ...]

    @property
    def redactions(self) -> Mapping[str, int]:
        return self.redacted.counts

    @property
    def redactions_by_detector(self) -> Mapping[str, int]:
        return self.redacted.by_detector


def prepare_entries(
    drafts: Sequence[EntryDraft], counter: Tokenizer, embedder: Embedder | None = None
) -> tuple[PreparedEntry, ...]:
    """Ids, hash, sizes and embedding of drafts that are already redacted."""
    return tuple(
        PreparedEntry(
            entry_id=draft.entry_id or new_entry_id(),
            entry_version_id=new_version_id(),
            kind=draft.kind,
            content=draft.content,
            tags=draft.tags,
            metadata=draft.metadata,
            content_hash=content_hash(draft.content),
            expires_at=draft.expires_at,
            sizes=counter.sizes(draft.content),
            embedding=None if embedder is None else to_bytes(embedder.embed(draft.content)),
        )
        for draft in drafts
    )


def prepare_write(
    command: P,
    counter: Tokenizer,
    embedder: Embedder | None = None,
    limits: InputLimits | None = None,
    first_entry: int = 0,
) -> Prepared[P]:
    """Redact the whole command, then hash, size and embed the redacted content.

    CPU-bound (regexes, BPE, inference): callers run it off the event loop. Only the content
    is hashed (dedupe, manifest), sized (ListMemory) and embedded (search). With limits, a
    command whose redacted text outgrows them is refused before any of that work.
    `first_entry`: see `redact_write` (a part of a larger AppendEntries).
    """
    redacted = redact_write(command, limits, first_entry)
    written = redacted.command
    if isinstance(written, AppendEntries):
        drafts = written.entries
    else:  # the new version keeps the revised entry's id
        drafts = (replace(written.entry, entry_id=written.entry_id),)
    return Prepared(redacted, prepare_entries(drafts, counter, embedder))


# A part of an AppendEntries prepared as one CPU job holds entries of about this much text, so a
# large write is many short jobs and the pool's workers free often (servicekit/cpu.py).
PART_CHARS = 32 * 1024


def draft_chars(draft: EntryDraft) -> int:
    """About how much text a draft holds (what its preparation works on)."""
    texts = (draft.content, draft.kind, *draft.tags, *draft.metadata, *draft.metadata.values())
    return sum(len(t) for t in texts)


def parts_of(command: AppendEntries) -> list[tuple[int, AppendEntries, int]]:
    """(first entry, the part as a command, its chars): consecutive entries of up to
    PART_CHARS of text (at least one entry each), in order."""
    parts: list[tuple[int, AppendEntries, int]] = []
    start, size = 0, 0
    entries = command.entries
    for index, draft in enumerate(entries):
        chars = draft_chars(draft)
        if index > start and size + chars > PART_CHARS:
            parts.append((start, replace(command, entries=entries[start:index]), size))
            start, size = index, 0
        size += chars
    parts.append((start, replace(command, entries=entries[start:]), size))
    return parts


def merge_parts(
    command: AppendEntries, parts: Sequence[Prepared[AppendEntries]], limits: InputLimits | None
) -> Prepared[AppendEntries]:
    """The prepared parts of `command` as the whole command prepared at once (limits checked
    on the whole, as redacted)."""
    redacted = merge_redacted(command, [p.redacted for p in parts])
    if limits is not None:
        raise_if(validate_stored(redacted.command, limits))
    return Prepared(redacted, tuple(e for p in parts for e in p.entries))
