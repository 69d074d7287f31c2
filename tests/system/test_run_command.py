"""`make run` and the `ration` CLI as users run them, in subprocesses."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.procs import BIN, ROOT, Proc, clean_env, embedded_data_dir, processes_mentioning

pytestmark = pytest.mark.system


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        return int(reply.status)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path


def test_make_run_serves_both_on_embedded_postgres_and_ctrl_c_leaves_nothing(
    data_dir: Path,
) -> None:
    proc = Proc.start(
        ["make", "--no-print-directory", "run"], clean_env(RATION_DATA_DIR=str(data_dir))
    )
    try:
        proc.wait_for("ready:")
        assert set(proc.addresses) == {"budget", "memory"}
        for address in proc.addresses.values():
            assert health(address) == health_pb2.HealthCheckResponse.SERVING
        assert processes_mentioning(str(data_dir)), "the embedded postgres should be running"
    finally:
        code = proc.stop(signal.SIGINT)
    # make itself dies of the SIGINT it forwards (as at a terminal); the service exits cleanly.
    assert code in (0, -signal.SIGINT), proc.stderr_tail()
    assert "stopped" in proc.rest_of_stdout()
    assert processes_mentioning(str(data_dir)) == []
    # A second start reuses the same data directory (the state a developer keeps between runs).
    again = Proc.start([str(BIN / "ration"), "up"], clean_env(RATION_DATA_DIR=str(data_dir)))
    try:
        again.wait_for("ready:")
    finally:
        assert again.stop() == 0
    assert processes_mentioning(str(data_dir)) == []


def test_make_run_uses_database_url_and_creates_its_schemas(
    empty_database_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "unused"
    proc = Proc.start(
        ["make", "--no-print-directory", "run"],
        clean_env(DATABASE_URL=empty_database_url, RATION_DATA_DIR=str(data_dir)),
    )
    try:
        proc.wait_for("ready:")
    finally:
        assert proc.stop() in (0, -signal.SIGINT)
    assert not data_dir.exists(), "no embedded server when DATABASE_URL is set"

    async def schemas() -> set[str]:
        conn = await asyncpg.connect(empty_database_url)
        try:
            rows = await conn.fetch("SELECT schema_name FROM public.ration_migrations")
            return {r["schema_name"] for r in rows}
        finally:
            await conn.close()

    assert asyncio.run(schemas()) == {"budget", "memory"}


def test_two_replicas_started_together_migrate_exactly_once(empty_database_url: str) -> None:
    env = clean_env(DATABASE_URL=empty_database_url)
    procs = [Proc.start([str(BIN / "ration"), "budget", "serve"], env) for _ in range(2)]
    try:
        for proc in procs:
            proc.wait_for("ready:")
            assert health(proc.addresses["budget"]) == health_pb2.HealthCheckResponse.SERVING
    finally:
        for proc in procs:
            assert proc.stop() == 0
    logs = "".join(proc.stderr_tail() for proc in procs)
    files = sorted((ROOT / "budget_service" / "store" / "migrations").glob("*.sql"))
    functions = sorted((ROOT / "budget_service" / "store" / "functions").glob("*.sql"))
    assert logs.count('"msg": "migration applied"') == len(files) + len(functions)

    async def ledger() -> list[tuple[str, int]]:
        conn = await asyncpg.connect(empty_database_url)
        try:
            rows = await conn.fetch("SELECT schema_name, version FROM public.ration_migrations")
            return sorted((r["schema_name"], r["version"]) for r in rows)
        finally:
            await conn.close()

    assert asyncio.run(ledger()) == [("budget", n) for n in range(1, len(files) + 1)]


def test_wildcard_bind_without_tokens_exits_with_a_clear_message() -> None:
    result = subprocess.run(
        [str(BIN / "ration"), "memory", "serve"],
        env=clean_env(RATION_MEMORY_LISTEN="0.0.0.0:0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "RATION_MEMORY_LISTEN" in result.stderr
    assert "binds only loopback" in result.stderr


@pytest.mark.parametrize("host", ["0", "[::]", "127.0.0.1.invalid"])
def test_a_bind_name_that_is_not_only_loopback_exits_2_with_one_line(host: str) -> None:
    result = subprocess.run(
        [str(BIN / "ration"), "budget", "serve"],
        env=clean_env(RATION_BUDGET_LISTEN=f"{host}:0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ration: configuration error: RATION_BUDGET_LISTEN=")
    assert "binds only loopback addresses" in lines[0]


def test_a_token_row_without_roles_exits_2_naming_the_row(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": [{"sha256": "%s", "tenant": "acme"}]}' % ("ab" * 32))
    result = subprocess.run(
        [str(BIN / "ration"), "budget", "serve"],
        env=clean_env(RATION_TOKEN_FILE=str(tokens), RATION_BUDGET_LISTEN="127.0.0.1:0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ration: configuration error: RATION_TOKEN_FILE=")
    assert "tokens[0].roles is required" in lines[0]
