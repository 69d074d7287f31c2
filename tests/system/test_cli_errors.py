"""`ration` commands that cannot do their work say why in one line and exit 2 (issue 26)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from servicekit.auth import digest
from tests.support.procs import BIN, ROOT, Proc, clean_env
from tests.support.servers import ThreadedServer

pytestmark = pytest.mark.system

WRITER, READER = "demo-writer-token", "demo-reader-token"


def ration(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ration"), *argv],
        cwd=ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("variable", ["DATABASE_URL", "RATION_DATABASE_URL"])
def test_migrate_with_a_malformed_url_names_the_variable(variable: str) -> None:
    line = assert_one_line(ration("migrate", **{variable: "notaurl"}), variable)
    assert "postgresql://" in line


def test_migrate_with_a_malformed_migrate_url_names_it() -> None:
    result = ration("migrate", RATION_MIGRATE_DATABASE_URL="postgresql://u:secret@host:port/db")
    line = assert_one_line(result, "RATION_MIGRATE_DATABASE_URL")
    assert "secret" not in line, "a URL's password is never echoed"


def test_migrate_against_a_closed_port_says_where_in_one_line() -> None:
    port = closed_port()
    url = f"postgresql://owner:hunter2@127.0.0.1:{port}/ration"
    line = assert_one_line(
        ration("migrate", RATION_DATABASE_URL=url), f"127.0.0.1:{port}/ration", "ConnectionRefused"
    )
    assert "hunter2" not in line
    assert "RATION_DATABASE_URL" in line


def test_migrate_of_a_missing_database_names_it(pg_server_url: str) -> None:
    url = pg_server_url.rsplit("/", 1)[0] + "/ration_no_such_database"
    assert_one_line(
        ration("migrate", RATION_MIGRATE_DATABASE_URL=url, RATION_DATABASE_URL=url),
        "ration_no_such_database",
        "RATION_MIGRATE_DATABASE_URL",
    )


@pytest.mark.parametrize("command", [["up"], ["budget", "serve"], ["memory", "serve"]])
def test_serving_with_a_malformed_url_exits_2_naming_the_variable(command: list[str]) -> None:
    assert_one_line(ration(*command, DATABASE_URL="notaurl"), "DATABASE_URL", "invalid")


def test_an_unreachable_database_is_retried_and_said_on_each_attempt_in_a_terminal() -> None:
    port = closed_port()
    env = clean_env(
        RATION_DATABASE_URL=f"postgresql://app:pw@127.0.0.1:{port}/ration",
        RATION_LOG_FORMAT="text",  # what a terminal gets
    )
    proc = Proc.start([str(BIN / "ration"), "budget", "serve"], env)
    try:
        proc.wait_for_stderr("attempt=3 ")
    finally:
        code = proc.stop(signal.SIGINT)
    assert code == 0
    attempts = [line for line in proc.errors if "database not ready" in line][:3]
    for number, line in enumerate(attempts, start=1):
        assert f"127.0.0.1:{port}/ration" in line, line
        assert re.search(r"retrying in [\d.]+s", line), line
        assert f"attempt={number}" in line, line
        assert "pw@" not in line


def test_demo_help_names_the_token_variable() -> None:
    result = ration("demo", "--help")
    assert result.returncode == 0
    assert "RATION_TOKEN" in result.stdout


@pytest.mark.parametrize("given", ["--budget", "--memory"])
def test_demo_with_one_address_is_a_usage_error(given: str) -> None:
    result = ration("demo", given, "127.0.0.1:50051")
    assert result.returncode == 2
    assert "--budget and --memory go together" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_against_unreachable_services_says_so_in_one_line() -> None:
    address = f"127.0.0.1:{closed_port()}"
    assert_one_line(ration("demo", "--budget", address, "--memory", address), "ration demo:")


@pytest.fixture
def guarded_services(database_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Budget and memory servers with a token file: a writer and a reader of one tenant."""
    tokens = tmp_path / "tokens.json"
    rows = [(WRITER, ["writer"]), (READER, ["reader"])]
    tokens.write_text(
        json.dumps({"tokens": [{"sha256": digest(t), "tenant": "t", "roles": r} for t, r in rows]})
    )
    servers = [
        ThreadedServer(kind, database_url, RATION_TOKEN_FILE=str(tokens))
        for kind in ("budget", "memory")
    ]
    try:
        for server in servers:
            server.start()
        yield servers[0].address, servers[1].address
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize(
    ("token", "words"),
    [(None, ("UNAUTHENTICATED", "RATION_TOKEN")), (READER, ("ROLE_REQUIRED", "writer"))],
)
def test_demo_refused_by_the_server_says_why_in_one_line(
    guarded_services: tuple[str, str], token: str | None, words: tuple[str, ...]
) -> None:
    budget, memory = guarded_services
    env = {"RATION_TOKEN": token} if token else {}
    assert_one_line(ration("demo", "--budget", budget, "--memory", memory, **env), *words)
    ok = ration("demo", "--budget", budget, "--memory", memory, RATION_TOKEN=WRITER)
    assert ok.returncode == 0, ok.stderr[-3000:]


def test_service_listening_is_logged_once_migrated_and_metrics_off_says_off(
    empty_database_url: str,
) -> None:
    env = clean_env(
        RATION_DATABASE_URL=empty_database_url,
        RATION_BUDGET_METRICS_LISTEN="off",
        RATION_LOG_FORMAT="json",
    )
    proc = Proc.start([str(BIN / "ration"), "budget", "serve"], env)
    try:
        proc.wait_for("ready:")
    finally:
        assert proc.stop(signal.SIGINT) == 0
    records = [json.loads(line) for line in proc.errors if line.startswith("{")]
    messages = [record["msg"] for record in records]
    assert "migration applied" in messages, messages
    listening = messages.index("service listening")
    assert listening > max(i for i, m in enumerate(messages) if m == "migration applied")
    assert records[listening]["metrics"] == "off"
