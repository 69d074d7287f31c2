"""Stored sizes are exact tiktoken counts, computed offline, and startup fails closed without
the verified encoding files (acceptance 3)."""

from __future__ import annotations

import gzip
import shutil
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from memory_service.adapters.tokenizer import ENCODINGS, Tokenizer, packaged_data_dir
from memory_service.definition import factory
from memory_service.domain.token_counters import TokenCounter
from memory_service.usecases.settings import MemorySettings
from servicekit.settings import Env, SettingsError
from tests.support.adapters import shared_tokenizer
from tests.support.tokens import tiktoken_encoding

CORPUS = (
    "plain ASCII: The quick brown fox jumps over the lazy dog.",
    "Grüße aus Köln — naïve café, façade, Ångström, e\u0301 (NFD), ß→SS",
    "中文字符和日本語のテキスト、한국어 텍스트도 있습니다。",
    "مرحبا بالعالم — नमस्ते दुनिया (क्षि), Ελληνικά, русский текст",
    "emoji 🎉🚀 family 👨‍👩‍👧‍👦 flags 🇩🇪🇯🇵 skin 👍🏽 keycap 1️⃣",
    'def f(x: int) -> int:\n    return x ** 2  # square\n\n\tif x != 0 { y = "a\\nb"; }\r\n',
    "SELECT id, count(*) FROM memory.entry_versions WHERE tenant_id = $1 GROUP BY 1;",
    "<|endoftext|> and <|endofprompt|> count as the plain text they are",
    "   whitespace   \n\n\n\t\t  runs  " + " " * 40,
    "numbers 1234567890 3.14159 -42 1e10 0x1F 1,000,000",
    "x" * 3000 + "🎉" * 50,
)
UNITS = (TokenCounter.O200K_BASE, TokenCounter.CL100K_BASE)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a socket or resolve a name fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the network was touched")

    for name in ("socket", "create_connection", "getaddrinfo"):
        monkeypatch.setattr(socket, name, refuse)


@pytest.fixture(scope="module")
def counter() -> Tokenizer:
    return shared_tokenizer()


@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("unit", UNITS)
def test_counts_equal_tiktoken_on_non_ascii_emoji_and_code(
    no_network: None, counter: Tokenizer, unit: TokenCounter, text: str
) -> None:
    assert counter.count(unit, text) == len(tiktoken_encoding(unit.value).encode_ordinary(text))


@settings(max_examples=150, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=300))
def test_counts_equal_tiktoken_on_arbitrary_text(counter: Tokenizer, text: str) -> None:
    for unit in UNITS:
        assert counter.count(unit, text) == len(tiktoken_encoding(unit.value).encode_ordinary(text))


def test_loading_and_counting_work_with_the_network_blocked(no_network: None) -> None:
    counter = Tokenizer.load()
    text = "offline 🎉 counting, naïve"
    for unit in UNITS:
        assert counter.count(unit, text) == len(tiktoken_encoding(unit.value).encode_ordinary(text))
    assert counter.count(TokenCounter.CHARS, text) == len(text)


def _data_dir(tmp_path: Path) -> Path:
    for name in ("o200k_base.tiktoken.gz", "cl100k_base.tiktoken.gz"):
        shutil.copy(packaged_data_dir() / name, tmp_path / name)
    return tmp_path


def _settings(data_dir: Path) -> MemorySettings:
    settings = MemorySettings.from_env(Env({"RATION_MEMORY_EMBEDDER": "off"}))
    return replace(settings, tokenizer_dir=data_dir)


def test_the_service_will_not_start_with_a_missing_encoding_file(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    (data / "o200k_base.tiktoken.gz").unlink()
    with pytest.raises(SettingsError, match=r"cannot start: tokenizer file .*o200k_base"):
        factory(_settings(data))


def test_the_service_will_not_start_with_a_tampered_encoding_file(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    path = data / "cl100k_base.tiktoken.gz"
    vocabulary = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(vocabulary.replace(b" 5\n", b" 6\n", 1)))
    with pytest.raises(SettingsError) as caught:
        factory(_settings(data))
    message = str(caught.value)
    assert "cl100k_base.tiktoken.gz" in message
    assert "sha256 mismatch" in message
    assert "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7" in message


def test_the_service_starts_from_a_verified_copy(tmp_path: Path, no_network: None) -> None:
    assert callable(factory(_settings(_data_dir(tmp_path))))


@pytest.mark.parametrize("unit", UNITS)
def test_pinned_patterns_and_special_tokens_are_tiktokens_own(unit: TokenCounter) -> None:
    # tiktoken's constructor would download the ranks; the test hands it an empty table.
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value={}):
        spec = getattr(openai_public, unit.value)()
    assert ENCODINGS[unit].pat_str == spec["pat_str"]
    assert ENCODINGS[unit].special_tokens == spec["special_tokens"]
    assert ENCODINGS[unit].filename == f"{unit.value}.tiktoken.gz"


@pytest.mark.timeout(60)  # a guard, not a measurement: the quadratic merge took 450 s
def test_a_64_kib_pre_token_is_sized_in_linear_time(counter: Tokenizer) -> None:
    dna = "ACGT" * (64 * 1024 // 4)  # one pre-token: no spaces, punctuation or case change
    for unit in UNITS:
        assert counter.count(unit, dna) == len(tiktoken_encoding(unit.value).encode_ordinary(dna))
