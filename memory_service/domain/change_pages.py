"""Change-page tokens: the (revision, entry_id) cursor a changes page hands back, opaque."""

from __future__ import annotations

import base64
import binascii

from memory_service.domain.ids import is_entry_id


def encode_page_token(revision: int, entry_id: str) -> str:
    return base64.urlsafe_b64encode(f"{revision}:{entry_id}".encode()).decode()


def decode_page_token(token: str) -> tuple[int, str] | None:
    """The (revision, entry_id) cursor of a token, or None when it is not one of ours."""
    try:
        revision, _, entry_id = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        cursor = (int(revision), entry_id)
    except (ValueError, binascii.Error, UnicodeError):
        return None
    return cursor if cursor[0] >= 1 and is_entry_id(cursor[1]) else None
