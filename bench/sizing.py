"""Worst-case entry sizing: a max-size entry of each hostile kind, ours beside tiktoken's own."""

from __future__ import annotations

import base64
import functools
import gzip
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tiktoken
import tiktoken.load

from memory_service.adapters.tokenizer import ENCODINGS, Tokenizer, packaged_data_dir

MAX_ENTRY_BYTES = 64 * 1024  # RATION_MEMORY_MAX_ENTRY_BYTES' default
REPEATS = 15


def _fill(size_bytes: int, draw: Callable[[], str]) -> str:
    """Characters from `draw` until the next one would pass `size_bytes` of UTF-8."""
    out: list[str] = []
    used = 0
    while True:
        char = draw()
        width = len(char.encode())
        if used + width > size_bytes:
            return "".join(out)
        out.append(char)
        used += width


def worst_case_texts(size_bytes: int = MAX_ENTRY_BYTES) -> dict[str, str]:
    """Entries without word breaks, each one long pre-token or close to it (deterministic).

    These are what made a pure-Python BPE quadratic: the merge cost grows with the square of
    the pre-token, and none of these texts gives the pre-tokenizer a space or punctuation.
    """
    rng = random.Random(113)
    return {
        "dna": _fill(size_bytes, lambda: rng.choice("ACGT")),
        "cjk": _fill(size_bytes, lambda: chr(rng.randint(0x4E00, 0x9FFF))),
        "emoji": _fill(size_bytes, lambda: chr(rng.randint(0x1F300, 0x1F64F))),
        "base64": base64.b64encode(rng.randbytes(size_bytes)).decode()[:size_bytes],
    }


def tiktoken_reference(data_dir: Path | None = None) -> dict[str, tiktoken.Encoding]:
    """tiktoken's own encodings, loaded by tiktoken's loader (which checks the sha256 itself)
    from a decompressed copy of the same shipped files, independently of our loader."""
    source = packaged_data_dir() if data_dir is None else data_dir
    encodings = {}
    with tempfile.TemporaryDirectory(prefix="ration-bench-tiktoken-") as tmp:
        for unit, spec in ENCODINGS.items():
            plain = Path(tmp) / spec.filename.removesuffix(".gz")
            plain.write_bytes(gzip.decompress((source / spec.filename).read_bytes()))
            encodings[unit.value] = tiktoken.Encoding(
                name=unit.value,
                pat_str=spec.pat_str,
                mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(plain), spec.sha256),
                special_tokens=dict(spec.special_tokens),
            )
    return encodings


def _encode_all(encodings: dict[str, tiktoken.Encoding], text: str) -> None:
    for encoding in encodings.values():
        encoding.encode_ordinary(text)


def _timed_ms(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def _paired_medians(
    ours: Callable[[], object], theirs: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Medians of alternating runs (which goes first alternates too), so drift in a shared
    machine's load hits both alike."""
    pairs = []
    for n in range(repeats):
        if n % 2:
            theirs_ms = _timed_ms(theirs)
            pairs.append((_timed_ms(ours), theirs_ms))
        else:
            pairs.append((_timed_ms(ours), _timed_ms(theirs)))
    return (
        round(statistics.median(p[0] for p in pairs), 3),
        round(statistics.median(p[1] for p in pairs), 3),
    )


def measure(size_bytes: int = MAX_ENTRY_BYTES, repeats: int = REPEATS) -> dict[str, Any]:
    """Per kind: our Tokenizer.sizes (every stored unit) and tiktoken's encode_ordinary of
    the same text in both encodings, median of `repeats`; `worst` names the slowest kind."""
    counter = Tokenizer.load()
    reference = tiktoken_reference()
    kinds: dict[str, dict[str, Any]] = {}
    for kind, text in worst_case_texts(size_bytes).items():
        sizes = counter.sizes(text)
        theirs = {name: len(enc.encode_ordinary(text)) for name, enc in reference.items()}
        ours = {unit.value: sizes[unit] for unit in ENCODINGS}
        if ours != theirs:  # a sizing figure of wrong counts would be meaningless
            raise AssertionError(f"{kind}: our sizes {ours} differ from tiktoken's {theirs}")
        ours_ms, tiktoken_ms = _paired_medians(
            functools.partial(counter.sizes, text),
            functools.partial(_encode_all, reference, text),
            repeats,
        )
        kinds[kind] = {
            "bytes": len(text.encode()),
            "tokens": ours,
            "ours_ms": ours_ms,
            "tiktoken_ms": tiktoken_ms,
            "ratio": round(ours_ms / tiktoken_ms, 3) if tiktoken_ms else None,
        }
    worst = max(kinds, key=lambda k: kinds[k]["ours_ms"])
    return {
        "status": "ok",
        "size_bytes": size_bytes,
        "repeats": repeats,
        "kinds": kinds,
        "worst": worst,
        "worst_ms": kinds[worst]["ours_ms"],
        "worst_tiktoken_ms": kinds[worst]["tiktoken_ms"],
    }
