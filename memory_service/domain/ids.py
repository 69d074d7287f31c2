"""Identifiers of the memory service: entry and version ids, and memory_ref validation."""

from __future__ import annotations

import re
import uuid

ENTRY_ID_PREFIX = "mem_ent_"
VERSION_ID_PREFIX = "mem_ver_"
MAX_MEMORY_REF_CHARS = 256

# Fixed widths matter: manifest_bytes counts an item as 222/224 bytes because every id is
# its prefix plus exactly 32 lowercase hex digits (DESIGN 4.2).
_ENTRY_ID = re.compile(r"mem_ent_[0-9a-f]{32}")
_VERSION_ID = re.compile(r"mem_ver_[0-9a-f]{32}")


def new_entry_id() -> str:
    """A fresh entry id: `mem_ent_` + 32 lowercase hex digits (a random UUID)."""
    return ENTRY_ID_PREFIX + uuid.uuid4().hex


def new_version_id() -> str:
    """A fresh entry version id: `mem_ver_` + 32 lowercase hex digits (a random UUID)."""
    return VERSION_ID_PREFIX + uuid.uuid4().hex


def is_entry_id(value: str) -> bool:
    return _ENTRY_ID.fullmatch(value) is not None


def is_version_id(value: str) -> bool:
    return _VERSION_ID.fullmatch(value) is not None


def validate_memory_ref(ref: str) -> bool:
    """True when `ref` is 1..256 printable characters with no `..` path segment.

    `str.isprintable` already rejects NUL, every control character, line/paragraph separators,
    lone surrogates and every whitespace except the ASCII space. Both `/` and `\\` count as
    segment separators, so a ref can never read as a parent-directory hop on any platform.
    """
    if not 1 <= len(ref) <= MAX_MEMORY_REF_CHARS or not ref.isprintable():
        return False
    return ".." not in ref.replace("\\", "/").split("/")
