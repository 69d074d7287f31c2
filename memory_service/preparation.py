"""Entries made ready to store: SR-1 redaction first, then ids, hash, sizes and embedding."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_service.commands import EntryDraft
from memory_service.embedding import Embedder, to_bytes
from memory_service.ids import new_entry_id, new_version_id
from memory_service.manifest import content_hash
from memory_service.redaction import DETECTOR_NAMES, Secret, redact
from memory_service.tokens import TokenCounter, TokenUnit

# Secret ids are caller-chosen, so metrics never use them as labels (DESIGN 7).
REQUEST_SECRET_LABEL = "request_secret"


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
    sizes: Mapping[TokenUnit, int]
    # float32 sentence vector of the redacted content; None when written without an embedder.
    embedding: bytes | None = None


@dataclass(frozen=True)
class Prepared:
    entries: tuple[PreparedEntry, ...]
    # Replacements by secret id or detector name (what the response reports); never values.
    redactions: Mapping[str, int]
    # The same counts under bounded labels: detector names, and one label for request secrets.
    redactions_by_detector: Mapping[str, int]


def prepare_entries(
    drafts: Sequence[EntryDraft],
    secrets: Sequence[Secret],
    counter: TokenCounter,
    embedder: Embedder | None = None,
) -> Prepared:
    """Redact every text field, then hash, size and embed the redacted content.

    CPU-bound (regexes, BPE, inference): callers run it off the event loop. Redaction covers
    kind, tags and metadata values too, so no stored field can hold a secret value; only the
    content is hashed (dedupe, manifest), sized (ListMemory) and embedded (search).
    """
    pairs = [(s.secret_id, s.value) for s in secrets]
    counts: Counter[str] = Counter()

    def clean(text: str) -> str:
        if not text:
            return text
        result = redact(text, pairs)
        counts.update(result.counts)
        return result.text

    entries = []
    for draft in drafts:
        content = clean(draft.content)
        entries.append(
            PreparedEntry(
                entry_id=draft.entry_id or new_entry_id(),
                entry_version_id=new_version_id(),
                kind=clean(draft.kind),
                content=content,
                tags=tuple(clean(tag) for tag in draft.tags),
                metadata={key: clean(value) for key, value in draft.metadata.items()},
                content_hash=content_hash(content),
                expires_at=draft.expires_at,
                sizes=counter.sizes(content),
                embedding=None if embedder is None else to_bytes(embedder.embed(content)),
            )
        )
    secret_ids = {s.secret_id for s in secrets}
    by_detector: Counter[str] = Counter()
    for name, count in counts.items():
        # A secret id equal to a detector name shares its count; it is labelled a request secret.
        known = name in DETECTOR_NAMES and name not in secret_ids
        by_detector[name if known else REQUEST_SECRET_LABEL] += count
    return Prepared(tuple(entries), dict(counts), dict(by_detector))
