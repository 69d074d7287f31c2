"""Each example in examples/ runs to its end against the fake provider and a real server."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.support.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("example", ["openai_budget", "anthropic_budget", "litellm_budget"])
async def test_example_is_stopped_by_its_budget(
    example: str, budget_address: str, fake_llm: FakeLLM
) -> None:
    env = os.environ | {
        "RATION_BUDGET_ADDRESS": budget_address,
        "OPENAI_BASE_URL": fake_llm.openai_url,
        "OPENAI_API_KEY": "test",
        "ANTHROPIC_BASE_URL": fake_llm.anthropic_url,
        "ANTHROPIC_API_KEY": "test",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("RATION_TOKEN", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / f"{example}.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-2000:]
    lines = out.decode().splitlines()
    assert lines[0] == "stopped by budget: BUDGET_EXHAUSTED"
    assert lines[1].startswith(f"consumed {fake_llm.billed_tokens} of 2000 tokens, 0 held")
    assert fake_llm.requests >= 2
