"""Preparation redacts first, so hashes, sizes and stored fields only ever see markers."""

from __future__ import annotations

import numpy as np
import pytest

from memory_service.commands import EntryDraft
from memory_service.embedding import Embedder, from_bytes
from memory_service.manifest import content_hash
from memory_service.preparation import REQUEST_SECRET_LABEL, prepare_entries
from memory_service.redaction import Secret
from memory_service.tokens import TokenCounter, TokenUnit

SECRET = "correct-horse-battery"
GITHUB = "ghp_" + "a1B2c3D4e5" * 4


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.load()


def test_hash_and_sizes_are_of_the_redacted_content(counter: TokenCounter) -> None:
    draft = EntryDraft(f"password {SECRET}", kind=SECRET, tags=(SECRET,), metadata={"k": SECRET})
    prepared = prepare_entries([draft], [Secret("vault", SECRET)], counter)
    (entry,) = prepared.entries
    redacted = "password [REDACTED:vault]"
    assert entry.content == redacted
    assert (entry.kind, entry.tags, dict(entry.metadata)) == (
        "[REDACTED:vault]",
        ("[REDACTED:vault]",),
        {"k": "[REDACTED:vault]"},
    )
    assert entry.content_hash == content_hash(redacted)
    assert entry.sizes[TokenUnit.CHARS] == len(redacted)
    assert entry.sizes[TokenUnit.O200K_BASE] == counter.count(TokenUnit.O200K_BASE, redacted)
    assert prepared.redactions == {"vault": 4}


def test_ids_are_kept_when_given_and_generated_otherwise(counter: TokenCounter) -> None:
    given = "mem_ent_" + "1" * 32
    first, second = prepare_entries(
        [EntryDraft("a", entry_id=given), EntryDraft("b")], [], counter
    ).entries
    assert first.entry_id == given
    assert second.entry_id.startswith("mem_ent_")
    assert second.entry_id != given
    assert first.entry_version_id != second.entry_version_id


def test_metric_labels_never_carry_caller_chosen_secret_ids(counter: TokenCounter) -> None:
    secrets = [Secret("customer-42-token", SECRET), Secret("jwt", "another-secret-value")]
    text = f"{SECRET} another-secret-value {GITHUB}"
    prepared = prepare_entries([EntryDraft(text)], secrets, counter)
    assert prepared.redactions == {"customer-42-token": 1, "jwt": 1, "github_token": 1}
    # A secret id that happens to equal a detector name is still a request secret.
    assert prepared.redactions_by_detector == {REQUEST_SECRET_LABEL: 2, "github_token": 1}


def test_the_vector_is_of_the_redacted_content_and_absent_without_an_embedder(
    counter: TokenCounter,
) -> None:
    embedder = Embedder.load()
    draft = EntryDraft(f"the vault password is {SECRET}")
    (entry,) = prepare_entries([draft], [Secret("vault", SECRET)], counter, embedder).entries
    assert entry.embedding is not None
    assert np.array_equal(from_bytes(entry.embedding), embedder.embed(entry.content))
    assert entry.content == "the vault password is [REDACTED:vault]"
    (bare,) = prepare_entries([draft], [Secret("vault", SECRET)], counter).entries
    assert bare.embedding is None
