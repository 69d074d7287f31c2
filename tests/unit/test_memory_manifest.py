"""Canonical bytes of a revision: the incremental size equals the materialised content."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.domain.ids import new_entry_id, new_version_id
from memory_service.domain.manifest import (
    ACTIVE_ITEM_BYTES,
    INACTIVE_ITEM_BYTES,
    Change,
    ChangeOp,
    EntryState,
    ManifestItem,
    canonical_content,
    canonical_json,
    changes_bytes,
    content_hash,
    entries_bytes,
    manifest_bytes,
)

HEX = "0123456789abcdef"
entry_ids = st.text(HEX, min_size=32, max_size=32).map(lambda h: "mem_ent_" + h)
version_ids = st.text(HEX, min_size=32, max_size=32).map(lambda h: "mem_ver_" + h)
hashes = st.text(HEX, min_size=64, max_size=64)
states = st.sampled_from(list(EntryState))
reasons = st.one_of(
    st.none(),
    st.just(""),
    st.sampled_from(["dedupe", "e\u0301", "A\u030angstro\u0308m", '\x00\x1f\x7f\u2028"\\', "🎉"]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
)


def materialise(items: list[ManifestItem], changes: list[Change]) -> bytes:
    """The reference: build the document by hand and let the rfc8785 package encode it."""

    def nfc(value: str) -> str:
        return unicodedata.normalize("NFC", value)

    entries = [
        {
            "entry_content_hash": i.entry_content_hash,
            "entry_id": i.entry_id,
            "entry_version_id": i.entry_version_id,
            "state": i.state.value,
        }
        for i in sorted(items, key=lambda i: i.entry_id.encode("utf-8"))
    ]
    audit = [
        {
            "entry_id": c.entry_id,
            "from_entry_version_id": c.from_entry_version_id,
            "op": c.op.value,
            "reason": nfc(c.reason) if c.reason else None,
            "to_entry_version_id": c.to_entry_version_id,
        }
        for c in sorted(changes, key=lambda c: c.entry_id.encode("utf-8"))
    ]
    return rfc8785.dumps(
        {
            "schema": "ration.memory.v1",
            "manifest": {"format": "flat-v1", "entries": entries},
            "changes": audit,
        }
    )


@st.composite
def revisions(draw: st.DrawFn) -> tuple[list[ManifestItem], list[Change]]:
    ids = draw(st.lists(entry_ids, unique=True, max_size=12))
    items = [ManifestItem(i, draw(version_ids), draw(hashes), draw(states)) for i in ids]
    changed = draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    changes = [
        Change(
            draw(st.sampled_from(list(ChangeOp))),
            entry_id,
            draw(st.none() | version_ids),
            draw(st.none() | version_ids),
            draw(reasons),
        )
        for entry_id in changed
    ]
    return items, changes


def item(state: EntryState = EntryState.ACTIVE) -> ManifestItem:
    return ManifestItem(new_entry_id(), new_version_id(), "0" * 64, state)


@pytest.mark.parametrize(
    ("state", "width"),
    [(EntryState.ACTIVE, ACTIVE_ITEM_BYTES), (EntryState.INACTIVE, INACTIVE_ITEM_BYTES)],
)
def test_item_widths_match_the_design(state: EntryState, width: int) -> None:
    one = item(state)
    encoded = rfc8785.dumps(
        {
            "entry_content_hash": one.entry_content_hash,
            "entry_id": one.entry_id,
            "entry_version_id": one.entry_version_id,
            "state": state.value,
        }
    )
    assert len(encoded) == width
    assert (ACTIVE_ITEM_BYTES, INACTIVE_ITEM_BYTES) == (222, 224)


def test_empty_revision_is_87_bytes() -> None:
    assert manifest_bytes(0, 0, []) == len(materialise([], [])) == 87


def test_items_add_their_width_plus_one_comma_between_elements() -> None:
    assert entries_bytes(0, 0) == 2
    assert entries_bytes(1, 0) == 2 + 222
    assert entries_bytes(2, 1) == 2 + 2 * 222 + 224 + 2


@settings(max_examples=300)
@given(revisions())
def test_manifest_bytes_equals_materialised_rfc8785_length(
    revision: tuple[list[ManifestItem], list[Change]],
) -> None:
    items, changes = revision
    active = sum(1 for i in items if i.state is EntryState.ACTIVE)
    expected = materialise(items, changes)
    assert canonical_content(items, changes) == expected
    assert manifest_bytes(active, len(items) - active, changes) == len(expected)


@given(revisions())
def test_content_does_not_depend_on_input_order(
    revision: tuple[list[ManifestItem], list[Change]],
) -> None:
    items, changes = revision
    assert canonical_content(items, changes) == canonical_content(items[::-1], changes[::-1])


def test_reason_is_nfc_normalised_and_empty_is_null() -> None:
    entry, version = new_entry_id(), new_version_id()
    nfd = Change(ChangeOp.DEACTIVATE, entry, version, version, "cafe\u0301")
    nfc = Change(ChangeOp.DEACTIVATE, entry, version, version, "caf\u00e9")
    assert canonical_content([], [nfd]) == canonical_content([], [nfc])
    assert "café".encode() in canonical_content([], [nfd])
    empty = Change(ChangeOp.ADD, entry, None, version, "")
    missing = Change(ChangeOp.ADD, entry, None, version, None)
    assert canonical_content([], [empty]) == canonical_content([], [missing])
    assert b'"reason":null' in canonical_content([], [empty])


def test_changes_bytes_is_the_length_of_the_changes_array() -> None:
    changes = [
        Change(ChangeOp.ADD, new_entry_id(), None, new_version_id(), "first"),
        Change(ChangeOp.COMPACT, new_entry_id(), new_version_id(), None, "cafe\u0301"),
    ]
    encoded = canonical_content([], changes)
    assert changes_bytes(changes) == len(rfc8785.dumps(json.loads(encoded)["changes"]))
    assert changes_bytes([]) == 2


def test_control_characters_in_reasons_use_jcs_escapes() -> None:
    change = Change(ChangeOp.COMPACT, new_entry_id(), new_version_id(), None, "a\x00\x08\t\x1f\x7f")
    encoded = canonical_content([], [change])
    assert b'"reason":"a\\u0000\\b\\t\\u001f\x7f"' in encoded
    assert encoded == materialise([], [change])


def test_items_and_changes_sort_by_entry_id_bytes() -> None:
    low = ManifestItem("mem_ent_" + "0" * 32, new_version_id(), "a" * 64, EntryState.ACTIVE)
    high = ManifestItem("mem_ent_" + "f" * 32, new_version_id(), "b" * 64, EntryState.ACTIVE)
    encoded = canonical_content([high, low], [])
    assert encoded.index(low.entry_id.encode()) < encoded.index(high.entry_id.encode())


def test_duplicate_entry_ids_are_rejected() -> None:
    one = item()
    with pytest.raises(ValueError, match="twice"):
        canonical_content([one, one], [])
    change = Change(ChangeOp.ADD, one.entry_id, None, one.entry_version_id)
    with pytest.raises(ValueError, match="twice"):
        canonical_content([], [change, change])


@pytest.mark.parametrize(
    ("entry_id", "version_id", "digest"),
    [
        ("mem_ent_short", "mem_ver_" + "0" * 32, "0" * 64),
        ("mem_ent_" + "0" * 32, "mem_ent_" + "0" * 32, "0" * 64),
        ("mem_ent_" + "0" * 32, "mem_ver_" + "0" * 32, "A" * 64),
    ],
)
def test_items_with_other_widths_cannot_exist(entry_id: str, version_id: str, digest: str) -> None:
    with pytest.raises(ValueError, match="entry|hash"):
        ManifestItem(entry_id, version_id, digest, EntryState.ACTIVE)


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_canonical_json_agrees_with_the_rfc8785_package(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_canonical_json_refuses_unsafe_integers_and_lone_surrogates() -> None:
    with pytest.raises(ValueError, match="integer"):
        canonical_json(2**53)
    with pytest.raises(ValueError):  # noqa: PT011 - UnicodeEncodeError from the UTF-8 step
        canonical_json("\ud800")


def test_content_hash_is_sha256_of_nfc_utf8_content() -> None:
    assert content_hash("cafe\u0301") == content_hash("caf\u00e9")
    assert content_hash("caf\u00e9") == hashlib.sha256("café".encode()).hexdigest()
    assert content_hash("a") != content_hash("a ")
