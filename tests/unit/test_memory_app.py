"""The composition root refuses configuration that breaks the capacity contract, by variable."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TypedDict

import pytest

from memory_service.adapters.embedder import Embedder
from memory_service.adapters.tokenizer import Tokenizer
from memory_service.definition import Adapters, factory
from memory_service.usecases.settings import MemorySettings
from servicekit.settings import Env, SettingsError
from tests.support.adapters import SHARED, shared_embedder, shared_tokenizer


def test_a_valid_configuration_builds() -> None:
    assert callable(factory(MemorySettings.from_env(Env({})), SHARED))


class Limits(TypedDict, total=False):
    """The capacity settings a case changes."""

    max_active_entries: int
    max_manifest_entries: int
    max_manifest_bytes: int
    min_tombstone_revisions: int
    cache_entries: int


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"max_active_entries": 0}, "RATION_MEMORY_MAX_ACTIVE_ENTRIES"),
        (
            {"max_active_entries": 11, "max_manifest_entries": 10},
            "RATION_MEMORY_MAX_ACTIVE_ENTRIES",
        ),
        ({"max_manifest_bytes": 1023}, "RATION_MEMORY_MAX_MANIFEST_BYTES"),
        ({"min_tombstone_revisions": -1}, "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS"),
        ({"cache_entries": -1}, "RATION_MEMORY_CACHE_ENTRIES"),
    ],
)
def test_settings_built_in_code_are_checked_too(change: Limits, variable: str) -> None:
    settings = replace(MemorySettings.from_env(Env({})), **change)
    with pytest.raises(SettingsError, match=variable):
        factory(settings)


def test_the_heavy_adapters_are_loaded_by_the_loaders_the_caller_gives() -> None:
    loaded: list[str] = []

    def tokenizer(data_dir: Path | None) -> Tokenizer:
        loaded.append(f"tokenizer {data_dir}")
        return shared_tokenizer(data_dir)

    def embedder() -> Embedder:
        loaded.append("embedder")
        return shared_embedder()

    factory(MemorySettings.from_env(Env({})), Adapters(tokenizer, embedder))
    assert loaded == ["tokenizer None", "embedder"]
    factory(MemorySettings.from_env(Env({"RATION_MEMORY_EMBEDDER": "off"})), Adapters(tokenizer))
    assert loaded == ["tokenizer None", "embedder", "tokenizer None"]
