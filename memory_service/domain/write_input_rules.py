"""Input rules of the write commands: each violation names its field and never echoes a value."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_service.domain.commands import (
    AppendEntries,
    ChangeEntryStates,
    CompactMemory,
    EntryDraft,
    OrganizeMemory,
    ReviseEntry,
    WriteCommand,
    WriteTarget,
)
from memory_service.domain.ids import is_entry_id, validate_memory_ref
from servicekit.errors import FieldViolation, validation_error
from servicekit.redaction import Secret, find_secret, validate_secrets, view_of

MAX_REQUEST_ID_CHARS = 128
MAX_KIND_CHARS = 64
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_METADATA_PAIRS = 32
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 1024
MAX_REASON_CHARS = 256
MAX_ENTRY_IDS = 1000


DEFAULT_MAX_REQUEST_TEXT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class InputLimits:
    """The configurable limits (settings); the rest are the fixed constants above."""

    max_entry_size_bytes: int
    max_batch_entries: int
    # All caller text of one write (contents, kinds, tags, metadata, reason, secret values),
    # in UTF-8 bytes: bounds what one request costs to redact, size and embed.
    max_request_text_bytes: int = DEFAULT_MAX_REQUEST_TEXT_BYTES


def raise_if(violations: Sequence[FieldViolation]) -> None:
    """Refuse the whole request (nothing is written) when anything is wrong with it."""
    if violations:
        raise validation_error(violations)


def _target(target: WriteTarget, *, request_id_required: bool = True) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    rid = target.request_id
    if not rid and request_id_required:
        found.append(FieldViolation("request_id", "is required (e.g. a UUIDv7)"))
    elif rid and (len(rid) > MAX_REQUEST_ID_CHARS or not rid.isprintable()):
        found.append(
            FieldViolation("request_id", f"must be 1..{MAX_REQUEST_ID_CHARS} printable characters")
        )
    if not validate_memory_ref(target.memory_ref):
        found.append(
            FieldViolation(
                "memory_ref",
                "must be 1..256 printable characters without control characters or '..' segments",
            )
        )
    if target.expected_revision is not None and target.expected_revision < 0:
        found.append(FieldViolation("expected_revision", "must be >= 0"))
    return found


def _reason(reason: str, field: str = "reason") -> list[FieldViolation]:
    if len(reason) > MAX_REASON_CHARS or (reason and not reason.isprintable()):
        return [FieldViolation(field, f"must be 0..{MAX_REASON_CHARS} printable characters")]
    return []


def _label(value: str, limit: int) -> bool:
    """A short printable label (kind, tag, metadata key)."""
    return len(value) <= limit and value.isprintable()


def _entry(
    entry: EntryDraft, path: str, limits: InputLimits, now: datetime
) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    if entry.entry_id and not is_entry_id(entry.entry_id):
        found.append(FieldViolation(f"{path}.entry_id", "must be empty or mem_ent_ + 32 hex"))
    if not _label(entry.kind, MAX_KIND_CHARS):
        found.append(
            FieldViolation(f"{path}.kind", f"must be 0..{MAX_KIND_CHARS} printable characters")
        )
    size = len(entry.content.encode("utf-8"))
    if not entry.content.strip():
        found.append(FieldViolation(f"{path}.content", "must not be empty"))
    elif "\x00" in entry.content:  # Postgres text cannot hold NUL
        found.append(FieldViolation(f"{path}.content", "must not contain NUL characters"))
    elif size > limits.max_entry_size_bytes:
        found.append(
            FieldViolation(
                f"{path}.content",
                f"is {size} bytes of UTF-8; the maximum is {limits.max_entry_size_bytes}",
            )
        )
    if len(entry.tags) > MAX_TAGS:
        found.append(FieldViolation(f"{path}.tags", f"at most {MAX_TAGS} tags"))
    for index, tag in enumerate(entry.tags):
        if not tag or not _label(tag, MAX_TAG_CHARS):
            found.append(
                FieldViolation(
                    f"{path}.tags[{index}]", f"must be 1..{MAX_TAG_CHARS} printable characters"
                )
            )
        elif tag in entry.tags[:index]:
            found.append(FieldViolation(f"{path}.tags[{index}]", "duplicates an earlier tag"))
    if len(entry.metadata) > MAX_METADATA_PAIRS:
        found.append(FieldViolation(f"{path}.metadata", f"at most {MAX_METADATA_PAIRS} pairs"))
    for key, value in sorted(entry.metadata.items()):
        if not key or not _label(key, MAX_METADATA_KEY_CHARS):
            found.append(
                FieldViolation(
                    f"{path}.metadata", f"keys must be 1..{MAX_METADATA_KEY_CHARS} printable chars"
                )
            )
        if len(value) > MAX_METADATA_VALUE_CHARS or "\x00" in value:
            found.append(
                FieldViolation(
                    f"{path}.metadata",
                    f"values must be at most {MAX_METADATA_VALUE_CHARS} chars, without NUL",
                )
            )
    if entry.expires_at is not None and entry.expires_at <= now:
        found.append(FieldViolation(f"{path}.expires_at", "must be in the future"))
    return found


def _secrets(secrets: Sequence[Secret]) -> list[FieldViolation]:
    return validate_secrets([(s.secret_id, s.value) for s in secrets])


def _draft_texts(entry: EntryDraft) -> Iterator[str]:
    yield entry.content
    yield entry.kind
    yield from entry.tags
    for key, value in entry.metadata.items():
        yield key
        yield value


def _text_total(
    texts: Iterable[str], field: str, secrets: Sequence[Secret], limits: InputLimits
) -> list[FieldViolation]:
    limit = limits.max_request_text_bytes
    total = sum(len(t.encode("utf-8")) for t in texts)
    total += sum(len(s.value.encode("utf-8")) for s in secrets)
    if total > limit:
        return [
            FieldViolation(
                field, f"the request's text is {total} bytes of UTF-8; the maximum is {limit}"
            )
        ]
    return []


def _identifiers(
    identifiers: Iterable[tuple[str, str]], secrets: Sequence[Secret]
) -> list[FieldViolation]:
    """Identifiers are stored and echoed as sent, so one holding a request secret (in any
    form) is refused rather than redacted; the violation names the secret, not its value."""
    if not secrets or validate_secrets([(s.secret_id, s.value) for s in secrets]):
        return []  # bad secrets are reported by _secrets
    views = [view_of(s.value) for s in secrets]
    found = []
    for field, identifier in identifiers:
        index = find_secret(identifier, views) if identifier else None
        if index is not None:
            found.append(FieldViolation(field, f"must not contain the value of secrets[{index}]"))
    return found


def _entry_ids(entry_ids: Iterable[str], field: str) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    seen: set[str] = set()
    for index, entry_id in enumerate(entry_ids):
        if not is_entry_id(entry_id):
            found.append(FieldViolation(f"{field}[{index}]", "must be mem_ent_ + 32 hex"))
        elif entry_id in seen:
            found.append(FieldViolation(f"{field}[{index}]", "duplicates an earlier id"))
        seen.add(entry_id)
    return found


def validate_append(
    command: AppendEntries, limits: InputLimits, now: datetime
) -> list[FieldViolation]:
    found = _target(command.target)
    count = len(command.entries)
    if not 1 <= count <= limits.max_batch_entries:
        found.append(FieldViolation("entries", f"must hold 1..{limits.max_batch_entries} entries"))
    for index, entry in enumerate(command.entries):
        found.extend(_entry(entry, f"entries[{index}]", limits, now))
    seen: set[str] = set()
    for index, entry in enumerate(command.entries):
        if entry.entry_id and entry.entry_id in seen:
            found.append(FieldViolation(f"entries[{index}].entry_id", "duplicates an earlier id"))
        seen.add(entry.entry_id)
    found.extend(_secrets(command.secrets))
    texts = (t for e in command.entries for t in _draft_texts(e))
    found.extend(_text_total(texts, "entries", command.secrets, limits))
    ids = [("request_id", command.target.request_id), ("memory_ref", command.target.memory_ref)]
    ids.extend((f"entries[{i}].entry_id", e.entry_id) for i, e in enumerate(command.entries))
    found.extend(_identifiers(ids, command.secrets))
    return found


def validate_revise(
    command: ReviseEntry, limits: InputLimits, now: datetime
) -> list[FieldViolation]:
    found = _target(command.target)
    if not is_entry_id(command.entry_id):
        found.append(FieldViolation("entry_id", "must be mem_ent_ + 32 hex"))
    if command.entry.entry_id and command.entry.entry_id != command.entry_id:
        found.append(FieldViolation("entry.entry_id", "must be empty or equal entry_id"))
    draft = EntryDraft(
        content=command.entry.content,
        kind=command.entry.kind,
        tags=command.entry.tags,
        metadata=command.entry.metadata,
        expires_at=command.entry.expires_at,
    )
    found.extend(_entry(draft, "entry", limits, now))
    found.extend(_secrets(command.secrets))
    found.extend(_reason(command.reason))
    texts = [*_draft_texts(command.entry), command.reason]
    found.extend(_text_total(texts, "entry", command.secrets, limits))
    ids = [
        ("request_id", command.target.request_id),
        ("memory_ref", command.target.memory_ref),
        ("entry_id", command.entry_id),
        ("entry.entry_id", command.entry.entry_id),
    ]
    found.extend(_identifiers(ids, command.secrets))
    return found


def _reason_and_secrets(
    target: WriteTarget,
    reason: str,
    secrets: Sequence[Secret],
    limits: InputLimits,
    entry_ids: Sequence[str] = (),
) -> list[FieldViolation]:
    """What a write whose only caller text is its reason must also pass."""
    found = _reason(reason)
    found.extend(_secrets(secrets))
    found.extend(_text_total([reason], "reason", secrets, limits))
    ids = [("request_id", target.request_id), ("memory_ref", target.memory_ref)]
    ids.extend((f"entry_ids[{i}]", entry_id) for i, entry_id in enumerate(entry_ids))
    found.extend(_identifiers(ids, secrets))
    return found


def validate_state_change(command: ChangeEntryStates, limits: InputLimits) -> list[FieldViolation]:
    found = _target(command.target)
    if not 1 <= len(command.entry_ids) <= MAX_ENTRY_IDS:
        found.append(FieldViolation("entry_ids", f"must hold 1..{MAX_ENTRY_IDS} ids"))
    found.extend(_entry_ids(command.entry_ids, "entry_ids"))
    found.extend(
        _reason_and_secrets(
            command.target, command.reason, command.secrets, limits, command.entry_ids
        )
    )
    return found


def validate_organize(command: OrganizeMemory) -> list[FieldViolation]:
    found = _target(command.target)
    if command.mode is None:
        found.append(FieldViolation("mode", "must be ORGANIZE_MODE_DEDUPE"))
    return found


def validate_compact(command: CompactMemory, limits: InputLimits) -> list[FieldViolation]:
    # A dry run writes nothing, so it needs no idempotency key.
    found = _target(command.target, request_id_required=not command.dry_run)
    if not command.dry_run and command.target.expected_revision is None:
        found.append(
            FieldViolation("expected_revision", "is required for a real run: the previewed head")
        )
    if command.limit < 0:
        found.append(FieldViolation("limit", "must be >= 0 (0 = no limit)"))
    found.extend(_reason_and_secrets(command.target, command.reason, command.secrets, limits))
    return found


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def validate_stored(command: WriteCommand, limits: InputLimits) -> list[FieldViolation]:
    """The size limits again, on the command as redacted: a marker can be longer than what it
    replaces, and what is stored (and answered) must fit the limits the service advertises."""
    if isinstance(command, AppendEntries):
        drafts = [(f"entries[{i}]", e) for i, e in enumerate(command.entries)]
        field, reason = "entries", ""
    elif isinstance(command, ReviseEntry):
        drafts, field, reason = [("entry", command.entry)], "entry", command.reason
    elif isinstance(command, ChangeEntryStates | CompactMemory):
        drafts, field, reason = [], "reason", command.reason
    else:
        return []  # OrganizeMemory carries no caller text
    found: list[FieldViolation] = []
    for path, draft in drafts:
        size = _utf8(draft.content)
        if size > limits.max_entry_size_bytes:
            found.append(
                FieldViolation(
                    f"{path}.content",
                    f"is {size} bytes of UTF-8 after redaction; "
                    f"the maximum is {limits.max_entry_size_bytes}",
                )
            )
    total = _utf8(reason) + sum(_utf8(t) for _, d in drafts for t in _draft_texts(d))
    if total > limits.max_request_text_bytes:
        found.append(
            FieldViolation(
                field,
                f"the request's text is {total} bytes of UTF-8 after redaction; "
                f"the maximum is {limits.max_request_text_bytes}",
            )
        )
    return found
