"""The offline embedder: pinned files, real vectors, fail closed on a tampered model."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from memory_service.adapters.embedder import (
    DIMENSION,
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
