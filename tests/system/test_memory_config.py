"""Invalid memory configuration stops `ration memory serve` before anything is written."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import subprocess
from pathlib import Path

import asyncpg
import pytest

from memory_service.adapters.tokenizer import packaged_data_dir
from tests.support.procs import BIN, clean_env

pytestmark = pytest.mark.system

BAD = [
    ({"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "20", "RATION_MEMORY_MAX_MANIFEST_ENTRIES": "10"},
     "RATION_MEMORY_MAX_ACTIVE_ENTRIES"),
    ({"RATION_MEMORY_MAX_MANIFEST_BYTES": "1023"}, "RATION_MEMORY_MAX_MANIFEST_BYTES"),
    ({"RATION_MEMORY_MIN_TOMBSTONE_REVISIONS": "-1"}, "RATION_MEMORY_MIN_TOMBSTONE_REVISIONS"),
    ({"RATION_MEMORY_MAX_HISTORY_REVISIONS": "0"}, "RATION_MEMORY_MAX_HISTORY_REVISIONS"),
    ({"RATION_MEMORY_COMPACTION_ENABLED": "maybe"}, "RATION_MEMORY_COMPACTION_ENABLED"),
    ({"RATION_MEMORY_EMBEDDER": "maybe"}, "RATION_MEMORY_EMBEDDER"),
    ({"RATION_MEMORY_CACHE_ENTRIES": "-1"}, "RATION_MEMORY_CACHE_ENTRIES"),
    ({"RATION_MEMORY_BUDGET_ADDRESS": "budget"}, "RATION_MEMORY_BUDGET_ADDRESS"),
    ({"RATION_CPU_WORKERS": "0"}, "RATION_CPU_WORKERS"),
    ({"RATION_CPU_TENANT_SHARE": "many"}, "RATION_CPU_TENANT_SHARE"),
]  # fmt: skip


async def tables(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT table_schema || '.' || table_name AS name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        return [r["name"] for r in rows]
    finally:
        await conn.close()


def test_invalid_memory_configuration_exits_naming_the_variable_and_writes_nothing(
    empty_database_url: str,
) -> None:
    for env, variable in BAD:
        result = subprocess.run(
            [str(BIN / "ration"), "memory", "serve"],
            env=clean_env(DATABASE_URL=empty_database_url, **env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, (env, result.stderr)
        assert "configuration error" in result.stderr
        assert variable in result.stderr
    assert asyncio.run(tables(empty_database_url)) == []


def test_serve_refuses_to_start_without_verified_encoding_files(
    empty_database_url: str, tmp_path: Path
) -> None:
    for name in ("o200k_base.tiktoken.gz", "cl100k_base.tiktoken.gz"):
        shutil.copy(packaged_data_dir() / name, tmp_path / name)
    target = tmp_path / "o200k_base.tiktoken.gz"
    target.write_bytes(gzip.compress(gzip.decompress(target.read_bytes()) + b"AAAA 999999\n"))
    result = subprocess.run(
        [str(BIN / "ration"), "memory", "serve"],
        env=clean_env(DATABASE_URL=empty_database_url, RATION_MEMORY_TOKENIZER_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "configuration error" in result.stderr
    assert "o200k_base.tiktoken.gz" in result.stderr
    assert "sha256 mismatch" in result.stderr
    assert asyncio.run(tables(empty_database_url)) == []
