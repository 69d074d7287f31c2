"""The offline embedder: pinned files, real vectors, fail closed on a tampered model."""

from __future__ import annotations

import functools
import shutil
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.adapters.embedder import (
    DIMENSION,
    MAX_TOKENS,
    Embedder,
    EmbedderFiles,
    EmbedderUnavailable,
    from_bytes,
    to_bytes,
)
from tests.support.adapters import shared_embedder


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


def test_vectors_are_unit_length_and_deterministic(embedder: Embedder) -> None:
    first = embedder.embed("The user prefers window seats on long flights.")
    again = embedder.embed("The user prefers window seats on long flights.")
    assert first.shape == (DIMENSION,)
    assert abs(float(np.linalg.norm(first)) - 1.0) < 1e-5
    assert np.array_equal(first, again)
    assert np.array_equal(from_bytes(to_bytes(first)), first)


def test_a_paraphrase_is_closer_than_unrelated_text(embedder: Embedder) -> None:
    query = embedder.embed("Which seat does the customer like when flying?")
    related = embedder.embed("The user prefers window seats on long flights.")
    unrelated = embedder.embed("Quarterly revenue grew twelve percent in Europe.")
    assert float(query @ related) > float(query @ unrelated) + 0.3


def test_loading_touches_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", refuse)
    Embedder.load().embed("offline")


def test_a_tampered_model_file_is_refused(tmp_path: Path) -> None:
    files = EmbedderFiles.packaged()
    model = tmp_path / "model.onnx"
    shutil.copy(files.model, model)
    with model.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00\x01\x02\x03")
    with pytest.raises(EmbedderUnavailable, match="not the pinned"):
        Embedder.load(EmbedderFiles(model=model, tokenizer=files.tokenizer))


def test_a_missing_tokenizer_is_refused(tmp_path: Path) -> None:
    files = EmbedderFiles.packaged()
    with pytest.raises(EmbedderUnavailable, match="tokenizer.json"):
        Embedder.load(EmbedderFiles(model=files.model, tokenizer=tmp_path / "tokenizer.json"))


@functools.cache
def _whole_tokenizer() -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(EmbedderFiles.packaged().tokenizer))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


def _whole(text: str) -> list[int]:
    """The tokens of `text` tokenized whole, then truncated: what Embedder.encode must equal."""
    return list(_whole_tokenizer().encode(text).ids)


@pytest.mark.parametrize(
    "text",
    [
        "short text",
        "word " * 5_000,  # far past MAX_TOKENS: a prefix is enough
        "x" * 15_000,  # no whitespace at all: tokenized whole
        "a" + " " * 20_000 + "late words after a long gap " * 50,  # the prefix falls short
        "unbelievably-hyphenated,punctuated;text! " * 400,
        "naïve café résumé Ångström " * 300,  # accents stripped by the normalizer
        "日本語のテキスト " * 600,  # CJK characters split one by one
        "\t\r\n".join(["tabbed", "lines"] * 2_000),
    ],
    ids=["short", "long", "unbroken", "gap", "punctuation", "accents", "cjk", "control"],
)
def test_a_long_text_is_tokenized_from_its_start_exactly_as_whole(
    embedder: Embedder, text: str
) -> None:
    assert list(embedder.encode(text).ids) == _whole(text)


@settings(max_examples=60)
@given(
    st.lists(
        st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from([" ", "\n", "\t"]),
        max_size=1_200,
    )
)
def test_any_text_is_tokenized_as_whole(words: list[str]) -> None:
    text = "".join(words)
    assert list(shared_embedder().encode(text).ids) == _whole(text)
