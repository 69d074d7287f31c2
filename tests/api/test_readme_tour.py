"""The README's API tour is executed as written, against real servers (no drift from the API)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import asyncpg

from tests.support.servers import StartServer

ROOT = Path(__file__).resolve().parents[2]


def readme_block(name: str) -> str:
    readme = (ROOT / "README.md").read_text()
    pattern = rf"<!-- {name}:begin -->\n```python\n(.*?)```\n<!-- {name}:end -->"
    block = re.search(pattern, readme, re.S)
    assert block, f"README.md lost its {name} block"
    return block.group(1)


def tour_code() -> str:
    return readme_block("tour")


async def run_block(code: str, **addresses: int) -> str:
    """Runs a README block in a fresh interpreter against the given servers; its stdout."""
    env = {**os.environ}
    env.update(
        {f"RATION_{kind.upper()}_ADDRESS": f"127.0.0.1:{p}" for kind, p in addresses.items()}
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode()


EXAMPLES = {"tour": "tour.py", "semantics": "semantics.py", "worst-case": "worst_case.py"}


def test_the_readme_blocks_are_the_example_files_verbatim() -> None:
    for name, file in EXAMPLES.items():
        assert readme_block(name) == (ROOT / "examples" / file).read_text(), file


def test_no_python_block_of_the_readme_spells_the_policy_as_protobuf() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks
    for block in blocks:
        assert "BudgetPolicy" not in block
        assert "max_cost_nanos" not in block


async def test_readme_tour_runs_against_real_servers_twice(start_server: StartServer) -> None:
    budget = await start_server("budget")
    memory = await start_server("memory")
    for _ in range(2):  # a rerun is as clean as the first run
        text = await run_block(tour_code(), budget=budget.port, memory=memory.port)
        assert "[REDACTED:booking_key]" in text
        assert "sk-live-1234567890abcdef" not in text
        assert "budget.reserved" in text
        assert "budget.consumed" in text
        assert "cost 0.0062 1 0.9938" in text, text
        assert "toolCalls 1 10 9" in text, text
        assert "0E-9" not in text


async def test_readme_worst_case_and_report_block_runs_as_it_says(
    start_server: StartServer,
) -> None:
    budget = await start_server("budget")
    for _ in range(2):
        text = await run_block(readme_block("worst-case"), budget=budget.port)
        lines = text.splitlines()
        assert lines[0] == "max_tokens that fits: 1366"
        assert lines[1] == "overrun: Amounts(tokens=0, cost_nanos=0, tool_calls=0, retries=0)"
        assert lines[2:] == ["gpt-4o-mini 0.00072 USD 2100 tokens 1 calls"]


async def test_readme_budget_semantics_block_runs_as_it_says(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    budget = await start_server("budget")
    for _ in range(2):
        text = await run_block(readme_block("semantics"), budget=budget.port)
        assert text.splitlines() == [
            "overrun: 30",
            "granted up to: 870",
            "interrupted",
            "resumed: active",
            "pool: project True retry within a day: True",
            "run: active",
            "advisory: BUDGET_EXHAUSTED",
        ]
    open_holds = await db.fetchval("SELECT count(*) FROM budget.holds WHERE state = 'open'")
    assert open_holds == 0, "the block leaves no hold open"
