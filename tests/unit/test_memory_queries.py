"""Page tokens of GetChanges: opaque to callers, strictly checked when they come back."""

from __future__ import annotations

import base64

import pytest

from memory_service.domain.change_pages import decode_page_token, encode_page_token

ENTRY_ID = "mem_ent_" + "f" * 32


def test_a_token_round_trips_its_cursor() -> None:
    assert decode_page_token(encode_page_token(12, ENTRY_ID)) == (12, ENTRY_ID)


@pytest.mark.parametrize(
    "token",
    [
        "nope",
        "!!!",
        base64.urlsafe_b64encode(b"x:" + ENTRY_ID.encode()).decode(),
        base64.urlsafe_b64encode(b"0:" + ENTRY_ID.encode()).decode(),
        base64.urlsafe_b64encode(b"3:not-an-entry").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_anything_else_is_not_a_token(token: str) -> None:
    assert decode_page_token(token) is None
