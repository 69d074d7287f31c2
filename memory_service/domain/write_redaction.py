"""SR-1 over a whole write command: one pass over every caller text, and its fingerprint."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from memory_service.domain.commands import (
    AppendEntries,
    ChangeEntryStates,
    CompactMemory,
    EntryDraft,
    OrganizeMemory,
    ReviseEntry,
    WriteCommand,
)
from memory_service.domain.write_input_rules import InputLimits, raise_if, validate_stored
from servicekit.errors import FieldViolation, validation_error
from servicekit.redaction import DETECTOR_NAMES, Redactor, Secret, SecretBesideMarker

# Secret ids are caller-chosen, so metrics never use them as labels (DESIGN 7).
REQUEST_SECRET_LABEL = "request_secret"
W = TypeVar("W", AppendEntries, ReviseEntry, ChangeEntryStates, OrganizeMemory, CompactMemory)


@dataclass(frozen=True)
class RedactedWrite(Generic[W]):
    """A write command as it may be stored: every text redacted, secret values dropped."""

    command: W
    # Replacements by secret id or detector name (what the response reports); never values.
    counts: Mapping[str, int]
    # The same counts under bounded labels: detector names, and one label for request secrets.
    by_detector: Mapping[str, int]

    @property
    def fingerprint(self) -> bytes:
        """The idempotency fingerprint's input: canonical JSON of the redacted command, in
        which a secret is its id alone, so nothing derived from a secret value is stored."""
        return canonical_json(self.command)


class _Cleaner:
    def __init__(self, secrets: tuple[Secret, ...]) -> None:
        self._redactor = Redactor([(s.secret_id, s.value) for s in secrets])
        self._index = {s.secret_id: i for i, s in enumerate(secrets)}
        self.counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        try:
            result = self._redactor.redact(text)
        except SecretBesideMarker as error:
            field = f"secrets[{self._index[error.secret_id]}].value"
            raise validation_error(
                [FieldViolation(field, "would reappear beside a redaction marker")]
            ) from None
        self.counts.update(result.counts)
        return result.text

    def draft(self, draft: EntryDraft, path: str) -> EntryDraft:
        # Two tags equal once redacted are one tag; two metadata keys equal once redacted would
        # lose a value, so that write is refused.
        tags = tuple(dict.fromkeys(self(tag) for tag in draft.tags))
        metadata: dict[str, str] = {}
        for key, value in draft.metadata.items():
            clean_key = self(key)
            if clean_key in metadata:
                raise validation_error(
                    [FieldViolation(f"{path}.metadata", "two keys are equal once redacted")]
                )
            metadata[clean_key] = self(value)
        return replace(
            draft,
            content=self(draft.content),
            kind=self(draft.kind),
            tags=tags,
            metadata=metadata,
        )


def _ids_only(secrets: tuple[Secret, ...]) -> tuple[Secret, ...]:
    return tuple(Secret(s.secret_id, "") for s in secrets)


def redact_write(
    command: W, limits: InputLimits | None = None, first_entry: int = 0
) -> RedactedWrite[W]:
    """Redact every caller-supplied text of a write (content, kind, tags, metadata keys and
    values, reason) with the request's secrets and the built-in detectors; with limits, refuse
    a write whose redacted text no longer fits them (markers can outgrow what they replace).

    Pure and CPU-bound (regexes over up to the request's text limit): run it off the event
    loop. Identifiers are not rewritten: validation refuses one that holds a request secret.
    `first_entry`: the index in the whole request of an AppendEntries' first entry,
    when the command is a part of it (violations name the request's fields).
    """
    clean = _Cleaner(getattr(command, "secrets", ()))
    redacted = cast(W, _rewrite(command, clean, first_entry))
    if limits is not None:
        raise_if(validate_stored(redacted, limits))
    return RedactedWrite(redacted, dict(clean.counts), _by_detector(clean.counts, command))


def _rewrite(command: WriteCommand, clean: _Cleaner, first_entry: int = 0) -> WriteCommand:
    if isinstance(command, AppendEntries):
        entries = tuple(
            clean.draft(e, f"entries[{first_entry + i}]") for i, e in enumerate(command.entries)
        )
        return replace(command, entries=entries, secrets=_ids_only(command.secrets))
    if isinstance(command, ReviseEntry):
        return replace(
            command,
            entry=clean.draft(command.entry, "entry"),
            secrets=_ids_only(command.secrets),
            reason=clean(command.reason),
        )
    if isinstance(command, ChangeEntryStates | CompactMemory):
        return replace(command, reason=clean(command.reason), secrets=_ids_only(command.secrets))
    return command  # OrganizeMemory carries no caller text


def merge_redacted(
    command: AppendEntries, parts: Sequence[RedactedWrite[AppendEntries]]
) -> RedactedWrite[AppendEntries]:
    """The parts of an AppendEntries redacted one by one (`first_entry`), as one: the whole
    command's entries in order, the counts summed. Nothing else of the command is caller
    text (the secrets are ids only)."""
    counts: Counter[str] = Counter()
    by_detector: Counter[str] = Counter()
    entries: list[EntryDraft] = []
    for part in parts:
        counts.update(part.counts)
        by_detector.update(part.by_detector)
        entries.extend(part.command.entries)
    whole = replace(command, entries=tuple(entries), secrets=_ids_only(command.secrets))
    return RedactedWrite(whole, dict(counts), dict(by_detector))


def _by_detector(counts: Mapping[str, int], command: WriteCommand) -> dict[str, int]:
    secret_ids = {s.secret_id for s in getattr(command, "secrets", ())}
    by_detector: Counter[str] = Counter()
    for name, count in counts.items():
        # A secret id equal to a detector name shares its count; it is labelled a request secret.
        known = name in DETECTOR_NAMES and name not in secret_ids
        by_detector[name if known else REQUEST_SECRET_LABEL] += count
    return dict(by_detector)


def _plain(value: Any) -> Any:
    if isinstance(value, Secret):
        return value.secret_id
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def canonical_json(command: WriteCommand) -> bytes:
    """Sorted keys, no spaces, UTF-8: the same command always encodes to the same bytes."""
    document = {"type": type(command).__name__, "command": _plain(command)}
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )
