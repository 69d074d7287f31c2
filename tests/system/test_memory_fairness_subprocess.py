"""The issue 17 probe, against `ration memory serve` as users start it with its defaults: six
concurrent 16 KiB appends without word breaks from tenant A (they once held the shared default
executor for over a minute) while tenant B appends 15 bytes with the client's default deadline."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from bench.sizing import worst_case_texts
from ration_client import MemoryClient
from servicekit.auth import digest
from tests.support.procs import BIN, Proc, clean_env

pytestmark = pytest.mark.system

KINDS = ("dna", "cjk", "emoji", "base64", "dna", "cjk")  # six appends, 16 KiB each


async def probe(address: str) -> tuple[list[int], int]:
    texts = worst_case_texts(16 * 1024)
    async with (
        MemoryClient(address, token="tenant-a", timeout=120) as a,
        MemoryClient(address, token="tenant-b") as b,  # the client's default deadline
    ):
        floods = [
            asyncio.create_task(a.append(f"a/{n}", [texts[kind]])) for n, kind in enumerate(KINDS)
        ]
        await asyncio.sleep(0)  # A's appends are on their way first
        small = await b.append("b/notes", ["fifteen bytes!!"])
        replies = await asyncio.gather(*floods)
    return [r.revision for r in replies], small.revision


def test_a_tenants_small_append_is_answered_within_the_default_deadline_during_a_flood(
    database_url: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.json"
    rows = [
        {"sha256": digest("tenant-a"), "tenant": "a", "roles": ["writer"]},
        {"sha256": digest("tenant-b"), "tenant": "b", "roles": ["writer"]},
    ]
    tokens.write_text(json.dumps({"tokens": rows}))
    env = clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_TOKEN_FILE=str(tokens),
        RATION_LOG_LEVEL="WARNING",
    )
    proc = Proc.start([str(BIN / "ration"), "memory", "serve"], env)
    try:
        proc.wait_for("ready:")
        flood, small = asyncio.run(probe(proc.addresses["memory"]))
        assert small == 1
        assert flood == [1] * len(KINDS)  # every flood append was served too
        assert proc.stop(signal.SIGTERM) == 0, proc.stderr_tail()
    finally:
        if proc.popen.poll() is None:
            proc.stop(signal.SIGKILL)
