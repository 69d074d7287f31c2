"""The memory exercise the Citus system test runs (tests/support/citus_memory.py) passes on one
PostgreSQL: the reference for what every RPC answers there."""

from __future__ import annotations

from pathlib import Path

from tests.support.citus_memory import SERVICE_ENV, exercise_memory, write_token_file
from tests.support.servers import StartServer


async def test_every_memory_rpc_answers_as_the_exercise_expects(
    start_server: StartServer, tmp_path: Path
) -> None:
    tokens = write_token_file(tmp_path / "tokens.json")
    runner = await start_server("memory", RATION_TOKEN_FILE=str(tokens), **SERVICE_ENV)
    await exercise_memory(f"127.0.0.1:{runner.port}", "alpha-admin", "beta-admin")
