"""`ration pools` against a real budget service: put, list, show with its window, delete."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from ration_client import Amounts, BudgetClient, usd
from servicekit.auth import digest
from tests.support.servers import StartServer

TOKENS = {"pools-admin": "admin", "pools-reader": "reader"}


@pytest.fixture
async def address(start_server: StartServer, tmp_path: Path) -> str:
    tokens = tmp_path / "tokens.json"
    rows = [{"sha256": digest(t), "tenant": "t", "roles": [r]} for t, r in TOKENS.items()]
    tokens.write_text(json.dumps({"tokens": rows}))
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    return f"127.0.0.1:{runner.port}"


async def pools(address: str, *argv: str, token: str = "pools-admin") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ration_server.entry",
        "pools",
        "--budget",
        address,
        *argv,
        env={**os.environ, "RATION_TOKEN": token},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_put_list_show_delete(address: str) -> None:
    code, out, err = await pools(
        address, "put", "project", "fleet", "--window", "day", "--max-cost", "5",
        "--max-model-calls", "100", "--model-match", "gpt-4o*",
    )  # fmt: skip
    assert code == 0, err
    code, out, err = await pools(address, "put", "agent", "booker", "--max-tokens", "1000")
    assert code == 0, err
    async with BudgetClient(address, token="pools-admin") as client:
        await client.open_run("r1", project_id="fleet", agent_id="booker")
        usage = Amounts(tokens=40, cost_nanos=usd("0.25"))
        await client.consume("r1", model="gpt-4o-mini", usage=usage)

    code, out, err = await pools(address, "list")
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines[0][:4] == ["scope", "id", "window", "enforcement"]
    assert lines[1] == ["agent", "booker", "none", "hard", "-", "1000", "-", "-", "-", '""', "1"]
    assert lines[2] == [
        "project",
        "fleet",
        "day",
        "hard",
        "5",
        "-",
        "-",
        "-",
        "100",
        "gpt-4o*",
        "1",
    ]
    code, out, err = await pools(address, "list", "--window", "day")
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["fleet"]

    code, out, err = await pools(address, "show", "project", "fleet")
    assert code == 0, err
    assert "window from " in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line}
    assert rows["cost"] == ["5", "0.25", "0", "4.75"]
    assert rows["modelCalls"] == ["100", "1", "0", "99"]  # the Consume named a model

    code, out, err = await pools(address, "delete", "project", "fleet")
    assert (code, out.strip()) == (0, "deleted: project fleet")
    code, out, err = await pools(address, "show", "project", "fleet")
    assert code == 1
    assert err.strip().splitlines() == [err.strip()]
    assert "SCOPE_BUDGET_NOT_FOUND" in err


async def test_a_reader_is_refused_in_one_line(address: str) -> None:
    code, out, err = await pools(address, "list", token="pools-reader")
    assert code == 1
    assert "ROLE_REQUIRED" in err
    assert "Traceback" not in err
