"""Canonical content of a revision (RFC 8785 JSON) and its exact size, computed incrementally."""

from __future__ import annotations

import enum
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from memory_service.domain.ids import is_entry_id, is_version_id

SCHEMA = "ration.memory.v1"
FORMAT = "flat-v1"

# One item at the fixed id widths (domain/ids.py) and a 64-hex hash, framing included:
# {"entry_content_hash":"<64>","entry_id":"<40>","entry_version_id":"<40>","state":"active"}
ACTIVE_ITEM_BYTES = 222
INACTIVE_ITEM_BYTES = 224
# The document with both arrays removed (brackets included in the array sizes below):
# {"changes":,"manifest":{"entries":,"format":"flat-v1"},"schema":"ration.memory.v1"}
_FRAME_BYTES = 83

_CONTENT_HASH = re.compile(r"[0-9a-f]{64}")
_MAX_SAFE_INT = 2**53 - 1  # JCS numbers are IEEE doubles; only "safe" integers round-trip


class EntryState(enum.StrEnum):
    ACTIVE = "active"
    INACTIVE = "inactive"  # a tombstone: still in the manifest, off the active surface


class ChangeOp(enum.StrEnum):
    ADD = "add"
    REVISE = "revise"
    DEACTIVATE = "deactivate"
    REACTIVATE = "reactivate"
    COMPACT = "compact"


@dataclass(frozen=True)
class ManifestItem:
    """One manifest item. Ids and hash are checked so that every item has the counted width."""

    entry_id: str
    entry_version_id: str
    entry_content_hash: str
    state: EntryState

    def __post_init__(self) -> None:
        if not is_entry_id(self.entry_id):
            raise ValueError(f"not an entry id: {self.entry_id!r}")
        if not is_version_id(self.entry_version_id):
            raise ValueError(f"not an entry version id: {self.entry_version_id!r}")
        if _CONTENT_HASH.fullmatch(self.entry_content_hash) is None:
            raise ValueError("entry_content_hash must be 64 lowercase hex digits")


@dataclass(frozen=True)
class Change:
    """One audit record of a revision.

    Conventions: add None -> new version; revise old -> new; deactivate and reactivate name the
    item's (unchanged) version on both sides; compact names the dropped version and None.
    An empty reason encodes as null, like a missing one.
    """

    op: ChangeOp
    entry_id: str
    from_entry_version_id: str | None
    to_entry_version_id: str | None
    reason: str | None = None

    def __post_init__(self) -> None:
        if not is_entry_id(self.entry_id):
            raise ValueError(f"not an entry id: {self.entry_id!r}")
        for version in (self.from_entry_version_id, self.to_entry_version_id):
            if version is not None and not is_version_id(version):
                raise ValueError(f"not an entry version id: {version!r}")


JsonValue = None | bool | int | str | list["JsonValue"] | dict[str, "JsonValue"]

# ECMAScript JSON.stringify escaping, which RFC 8785 adopts: the two-character forms where they
# exist, \u00xx (lowercase hex) for the other C0 controls; everything else is literal UTF-8.
_ESCAPES: dict[int, str] = {code: f"\\u{code:04x}" for code in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\"})


def _encode(value: JsonValue, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        if abs(value) > _MAX_SAFE_INT:
            raise ValueError(f"integer {value} is not exactly representable in JCS")
        out.append(str(value))
    elif isinstance(value, str):
        out.append('"' + value.translate(_ESCAPES) + '"')
    elif isinstance(value, list):
        out.append("[")
        for index, element in enumerate(value):
            if index:
                out.append(",")
            _encode(element, out)
        out.append("]")
    else:
        out.append("{")
        # JCS orders members by UTF-16 code units; UTF-16BE bytes compare in that order.
        for index, key in enumerate(sorted(value, key=lambda k: k.encode("utf-16-be"))):
            if index:
                out.append(",")
            _encode(key, out)
            out.append(":")
            _encode(value[key], out)
        out.append("}")


def canonical_json(value: JsonValue) -> bytes:
    """RFC 8785 bytes of a value made of objects, arrays, strings, null, bools and safe ints.

    Lone surrogates cannot be encoded as UTF-8 and raise (UnicodeEncodeError is a ValueError).
    """
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode("utf-8")


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


def _item_json(item: ManifestItem) -> dict[str, JsonValue]:
    return {
        "entry_content_hash": item.entry_content_hash,
        "entry_id": item.entry_id,
        "entry_version_id": item.entry_version_id,
        "state": item.state.value,
    }


def _change_json(change: Change) -> dict[str, JsonValue]:
    return {
        "entry_id": change.entry_id,
        "from_entry_version_id": change.from_entry_version_id,
        "op": change.op.value,
        "reason": _nfc(change.reason) if change.reason else None,
        "to_entry_version_id": change.to_entry_version_id,
    }


_Record = TypeVar("_Record", ManifestItem, Change)


def _sorted_unique(records: Iterable[_Record], what: str) -> list[_Record]:
    # Ids are ASCII by construction, so NFC leaves them unchanged and str order is byte order;
    # the explicit UTF-8 key keeps the documented rule visible.
    ordered = sorted(records, key=lambda record: record.entry_id.encode("utf-8"))
    for previous, current in zip(ordered, ordered[1:], strict=False):
        if previous.entry_id == current.entry_id:
            raise ValueError(f"{what} name entry {current.entry_id} twice")
    return ordered


def document(items: Iterable[ManifestItem], changes: Iterable[Change]) -> dict[str, JsonValue]:
    """The revision's canonical document as plain values, items and changes sorted by entry_id."""
    entries: list[JsonValue] = [_item_json(i) for i in _sorted_unique(items, "manifest items")]
    audit: list[JsonValue] = [_change_json(c) for c in _sorted_unique(changes, "changes")]
    return {
        "changes": audit,
        "manifest": {"entries": entries, "format": FORMAT},
        "schema": SCHEMA,
    }


def canonical_content(items: Iterable[ManifestItem], changes: Iterable[Change]) -> bytes:
    """The materialised canonical content of a revision; its length is `manifest_bytes`."""
    return canonical_json(document(items, changes))


def entries_bytes(active_count: int, inactive_count: int) -> int:
    """Bytes of the `entries` array (brackets included) holding that many items."""
    if active_count < 0 or inactive_count < 0:
        raise ValueError("item counts must be non-negative")
    count = active_count + inactive_count
    commas = max(count - 1, 0)
    return 2 + active_count * ACTIVE_ITEM_BYTES + inactive_count * INACTIVE_ITEM_BYTES + commas


def changes_bytes(changes: Sequence[Change]) -> int:
    """Bytes of the `changes` array (brackets included); encoded exactly, order does not matter."""
    total = 2 + max(len(changes) - 1, 0)
    return total + sum(len(canonical_json(_change_json(change))) for change in changes)


def manifest_bytes(active_count: int, inactive_count: int, changes: Sequence[Change]) -> int:
    """Exact length of the canonical content without materialising the manifest items.

    Equal to `len(canonical_content(items, changes))` for any items with those state counts,
    because every ManifestItem has the fixed width (domain/ids.py ids, 64-hex hash).
    """
    return _FRAME_BYTES + entries_bytes(active_count, inactive_count) + changes_bytes(changes)


def content_hash(content: str) -> str:
    """sha256 hex of the NFC-normalised UTF-8 content.

    Content only: kind, tags and metadata are not hashed, so dedupe (equal hashes) means equal
    text and `entry_content_hash` in the manifest commits to the body a citation quotes.
    """
    return hashlib.sha256(_nfc(content).encode("utf-8")).hexdigest()
