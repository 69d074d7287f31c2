"""The README's API tour is executed as written, against real servers (no drift from the API)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.support.servers import StartServer

ROOT = Path(__file__).resolve().parents[2]


def tour_code() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- tour:begin -->\n```python\n(.*?)```\n<!-- tour:end -->", readme, re.S)
    assert block, "README.md lost its tour block"
    return block.group(1)


async def test_readme_tour_runs_against_real_servers(start_server: StartServer) -> None:
    budget = await start_server("budget")
    memory = await start_server("memory")
    env = {
        **os.environ,
        "RATION_BUDGET_ADDRESS": f"127.0.0.1:{budget.port}",
        "RATION_MEMORY_ADDRESS": f"127.0.0.1:{memory.port}",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        tour_code(),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    text = out.decode()
    assert "[REDACTED:booking_key]" in text
    assert "sk-live-1234567890abcdef" not in text
    assert "budget.reserved" in text
    assert "budget.consumed" in text
