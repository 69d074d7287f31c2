"""The integration examples in examples/ run as shipped: against real budget and memory
services and a fake OpenAI endpoint (OPENAI_BASE_URL), each stopped by its run's budget."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI, FakeOpenAIServer
from tests.support.servers import StartServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def run_example(name: str, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / name),
        env={k: v for k, v in {**os.environ, **env}.items() if k != "RATION_TOKEN"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode()


@pytest.mark.parametrize(
    "name", ["agents_budget.py", "langgraph_budget.py", "pydantic_ai_budget.py"]
)
async def test_an_example_runs_and_is_stopped_by_its_budget(
    name: str, start_server: StartServer
) -> None:
    budget = await start_server("budget")
    memory = await start_server("memory")
    with FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake:
        env = {
            "RATION_BUDGET_ADDRESS": f"127.0.0.1:{budget.port}",
            "RATION_MEMORY_ADDRESS": f"127.0.0.1:{memory.port}",
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "test-key",
        }
        out = await run_example(name, env)
    assert "stopped by the budget: BUDGET_EXHAUSTED" in out, out
    assert re.search(r"toolCalls: consumed 3, held 0", out), out
    assert re.search(r"tokens: consumed [1-9]\d*, held 0", out), out
    assert len(fake.requests) == 4
    if name == "agents_budget.py":
        assert "stored first item: Check flight LH123 (key [REDACTED:api])" in out, out
    if name == "langgraph_budget.py":
        assert "stored note: asked for 1 lookups" in out, out
