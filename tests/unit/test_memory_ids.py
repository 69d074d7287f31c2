"""Entry and version ids, and memory_ref validation."""

from __future__ import annotations

import re

import pytest

from memory_service.domain.ids import (
    is_entry_id,
    is_version_id,
    new_entry_id,
    new_version_id,
    validate_memory_ref,
)


def test_new_ids_are_prefix_plus_32_lowercase_hex() -> None:
    assert re.fullmatch(r"mem_ent_[0-9a-f]{32}", new_entry_id())
    assert re.fullmatch(r"mem_ver_[0-9a-f]{32}", new_version_id())


def test_new_ids_are_unique() -> None:
    assert len({new_entry_id() for _ in range(1000)}) == 1000


def test_id_validators_accept_their_own_kind_only() -> None:
    entry, version = new_entry_id(), new_version_id()
    assert is_entry_id(entry)
    assert not is_entry_id(version)
    assert is_version_id(version)
    assert not is_version_id(entry)
    assert not is_entry_id(entry.upper())
    assert not is_entry_id(entry + "0")
    assert not is_entry_id(entry[:-1])


@pytest.mark.parametrize(
    "ref",
    ["m", "mem:agent-7", "team/agent 7/notes", "a..b", "..a/b..", "ünïcode/メモリ", "x" * 256],
)
def test_memory_ref_accepts_printable_refs(ref: str) -> None:
    assert validate_memory_ref(ref)


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "x" * 257,
        "a\x00b",
        "a\nb",
        "tab\there",
        "del\x7f",
        "line\u2028sep",
        "..",
        "../etc",
        "a/../b",
        "a/..",
        "a\\..\\b",
    ],
)
def test_memory_ref_rejects_empty_long_control_and_dotdot(ref: str) -> None:
    assert not validate_memory_ref(ref)
