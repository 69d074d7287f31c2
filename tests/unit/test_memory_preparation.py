"""Preparation redacts the whole command first, so hashes, sizes and stored fields only ever see
markers, and the fingerprint holds no secret value."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from memory_service.adapters.embedder import from_bytes
from memory_service.adapters.tokenizer import Tokenizer
from memory_service.domain.commands import (
    AppendEntries,
    ChangeEntryStates,
    CompactMemory,
    EntryDraft,
    ReviseEntry,
    WriteTarget,
)
from memory_service.domain.manifest import content_hash
from memory_service.domain.token_counters import TokenCounter
from memory_service.domain.write_redaction import REQUEST_SECRET_LABEL, redact_write
from memory_service.usecases.preparation import (
    PART_CHARS,
    PreparedEntry,
    merge_parts,
    parts_of,
    prepare_write,
)
from servicekit.errors import BadRequestDetail, DomainError
from servicekit.redaction import Secret
from tests.support.adapters import shared_embedder, shared_tokenizer

SECRET = "correct-horse-battery"
GITHUB = "ghp_" + "a1B2c3D4e5" * 4
TARGET = WriteTarget("req-1", "team/memory")
ENTRY_ID = "mem_ent_" + "1" * 32


def append(*drafts: EntryDraft, secrets: tuple[Secret, ...] = ()) -> AppendEntries:
    return AppendEntries(TARGET, drafts, secrets)


@pytest.fixture(scope="module")
def counter() -> Tokenizer:
    return shared_tokenizer()


def test_hash_and_sizes_are_of_the_redacted_content(counter: Tokenizer) -> None:
    draft = EntryDraft(
        f"password {SECRET}",
        kind=SECRET,
        tags=(SECRET,),
        metadata={"k": SECRET, f"key-{SECRET}": "v"},
    )
    prepared = prepare_write(append(draft, secrets=(Secret("vault", SECRET),)), counter)
    (entry,) = prepared.entries
    redacted = "password [REDACTED:vault]"
    assert entry.content == redacted
    assert (entry.kind, entry.tags, dict(entry.metadata)) == (
        "[REDACTED:vault]",
        ("[REDACTED:vault]",),
        {"k": "[REDACTED:vault]", "key-[REDACTED:vault]": "v"},
    )
    assert entry.content_hash == content_hash(redacted)
    assert entry.sizes[TokenCounter.CHARS] == len(redacted)
    assert entry.sizes[TokenCounter.O200K_BASE] == counter.count(TokenCounter.O200K_BASE, redacted)
    assert prepared.redactions == {"vault": 5}


def test_ids_are_kept_when_given_and_generated_otherwise(counter: Tokenizer) -> None:
    first, second = prepare_write(
        append(EntryDraft("a", entry_id=ENTRY_ID), EntryDraft("b")), counter
    ).entries
    assert first.entry_id == ENTRY_ID
    assert second.entry_id.startswith("mem_ent_")
    assert second.entry_id != ENTRY_ID
    assert first.entry_version_id != second.entry_version_id


def test_a_revision_keeps_its_entry_id_and_its_reason_is_redacted(counter: Tokenizer) -> None:
    command = ReviseEntry(
        TARGET, ENTRY_ID, EntryDraft("new"), (Secret("vault", SECRET),), f"rotated {SECRET}"
    )
    prepared = prepare_write(command, counter)
    assert prepared.entries[0].entry_id == ENTRY_ID
    assert prepared.redacted.command.reason == "rotated [REDACTED:vault]"
    assert prepared.redactions == {"vault": 1}


def test_metric_labels_never_carry_caller_chosen_secret_ids(counter: Tokenizer) -> None:
    secrets = (Secret("customer-42-token", SECRET), Secret("jwt", "another-secret-value"))
    text = f"{SECRET} another-secret-value {GITHUB}"
    prepared = prepare_write(append(EntryDraft(text), secrets=secrets), counter)
    assert prepared.redactions == {"customer-42-token": 1, "jwt": 1, "github_token": 1}
    # A secret id that happens to equal a detector name is still a request secret.
    assert prepared.redactions_by_detector == {REQUEST_SECRET_LABEL: 2, "github_token": 1}


def test_the_vector_is_of_the_redacted_content_and_absent_without_an_embedder(
    counter: Tokenizer,
) -> None:
    embedder = shared_embedder()
    command = append(
        EntryDraft(f"the vault password is {SECRET}"), secrets=(Secret("vault", SECRET),)
    )
    (entry,) = prepare_write(command, counter, embedder).entries
    assert entry.embedding is not None
    assert np.array_equal(from_bytes(entry.embedding), embedder.embed(entry.content))
    assert entry.content == "the vault password is [REDACTED:vault]"
    (bare,) = prepare_write(command, counter).entries
    assert bare.embedding is None


def test_reasons_of_state_changes_and_compaction_are_redacted_by_detectors() -> None:
    forget = redact_write(ChangeEntryStates(TARGET, (ENTRY_ID,), f"leaked {GITHUB}"))
    compact = redact_write(CompactMemory(TARGET, dry_run=False, reason=f"leaked {GITHUB}"))
    for redacted in (forget, compact):
        assert redacted.command.reason == "leaked [REDACTED:github_token]"
        assert redacted.counts == {"github_token": 1}


def test_the_fingerprint_holds_secret_ids_and_redacted_text_only() -> None:
    def fingerprint(value: str) -> bytes:
        draft = EntryDraft(f"pw {value}", metadata={"note": value})
        return redact_write(append(draft, secrets=(Secret("vault", value),))).fingerprint

    first, second = fingerprint(SECRET), fingerprint("another-secret-value")
    assert first == second  # a guess of the value cannot be confirmed from the fingerprint
    assert SECRET.encode() not in first
    assert b'"vault"' in first
    # Any other difference is one.
    other = redact_write(append(EntryDraft("pw x"))).fingerprint
    assert other != first


def test_two_metadata_keys_equal_once_redacted_are_refused_by_field() -> None:
    draft = EntryDraft("x", metadata={f"a-{GITHUB}": "1", f"a-{GITHUB[:-1]}Z": "2"})
    with pytest.raises(DomainError) as raised:
        redact_write(append(draft))
    assert isinstance(raised.value.detail, BadRequestDetail)
    assert [v.field for v in raised.value.detail.violations] == ["entries[0].metadata"]
    assert GITHUB not in str(raised.value)


def test_tags_equal_once_redacted_become_one() -> None:
    draft = EntryDraft("x", tags=(f"t-{GITHUB}", f"t-{GITHUB[:-1]}Z", "plain"))
    (entry,) = redact_write(append(draft)).command.entries
    assert entry.tags == ("t-[REDACTED:github_token]", "plain")


def test_the_fingerprint_is_canonical_json_of_the_command() -> None:
    one = append(EntryDraft("x", metadata={"a": "1", "b": "2"}, tags=("t",)))
    other = append(EntryDraft("x", metadata={"b": "2", "a": "1"}, tags=("t",)))
    data = redact_write(one).fingerprint
    assert data == redact_write(other).fingerprint
    document = json.loads(data)
    assert document["type"] == "AppendEntries"
    assert document["command"]["entries"][0]["metadata"] == {"a": "1", "b": "2"}
    assert data == json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def test_an_append_prepared_in_parts_is_the_append_prepared_whole(counter: Tokenizer) -> None:
    """Large appends are prepared as parts of bounded text (one CPU job each): together they
    are the whole command's preparation, counts, fingerprint and violations included."""
    drafts = [
        EntryDraft(f"entry {n} " + "x" * 9000 + f" {SECRET} {GITHUB}", tags=(f"t{n}",))
        for n in range(9)
    ]
    command = append(*drafts, secrets=(Secret("vault", SECRET),))
    parts = parts_of(command)
    assert len(parts) > 1
    assert [first for first, _, _ in parts] == sorted({first for first, _, _ in parts})
    for _, part, chars in parts:
        assert chars <= PART_CHARS or len(part.entries) == 1
    prepared = [prepare_write(part, counter, None, None, first) for first, part, _ in parts]
    merged = merge_parts(command, prepared, None)
    whole = prepare_write(command, counter)
    assert merged.redacted.fingerprint == whole.redacted.fingerprint
    assert merged.redactions == whole.redactions == {"vault": 9, "github_token": 9}
    assert merged.redactions_by_detector == whole.redactions_by_detector

    def stored(entry: PreparedEntry) -> tuple[object, ...]:
        return (entry.content, entry.content_hash, dict(entry.sizes), entry.tags)

    assert [stored(e) for e in merged.entries] == [stored(e) for e in whole.entries]
    # A violation in a later part names the entry's index in the whole request.
    bad = append(*drafts, EntryDraft("c", metadata={SECRET: "1", "[REDACTED:vault]": "2"}))
    first, last, _ = parts_of(replace(bad, secrets=(Secret("vault", SECRET),)))[-1]
    with pytest.raises(DomainError) as refused:
        prepare_write(last, counter, None, None, first)
    detail = refused.value.detail
    assert isinstance(detail, BadRequestDetail)
    assert [v.field for v in detail.violations] == ["entries[9].metadata"]
