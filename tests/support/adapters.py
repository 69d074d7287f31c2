"""The memory service's heavy adapters loaded once per test session and shared by every server.

Each memory server would otherwise load and verify the encodings and the ONNX model again (about
1 s of CPU, several seconds on a loaded machine). Only the packaged files are shared: a test that
points the tokenizer at its own directory, or the embedder at other files (a tampered model),
still gets a fresh load, and so the failure it expects.
"""

from __future__ import annotations

import functools
from pathlib import Path

from memory_service.adapters.embedder import Embedder, EmbedderFiles
from memory_service.adapters.tokenizer import Tokenizer
from memory_service.definition import Adapters


@functools.cache
def _packaged_tokenizer() -> Tokenizer:
    return Tokenizer.load()


@functools.cache
def _embedder(files: EmbedderFiles) -> Embedder:
    return Embedder.load(files)  # an exception is not cached: a bad file fails every time


def shared_tokenizer(data_dir: Path | None = None) -> Tokenizer:
    """The session's Tokenizer of the packaged files, or a fresh one of `data_dir`."""
    return _packaged_tokenizer() if data_dir is None else Tokenizer.load(data_dir)


def shared_embedder() -> Embedder:
    """The session's Embedder of the files Embedder.load would read now."""
    return _embedder(EmbedderFiles.packaged())


SHARED = Adapters(tokenizer=shared_tokenizer, embedder=shared_embedder)


def for_service(kind: str) -> Adapters | None:
    """The shared adapters of service `kind` (None: it has no heavy ones)."""
    return SHARED if kind == "memory" else None
