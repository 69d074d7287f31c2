"""One listener per port: a port another process holds ends the start with one line that names
the variable to change, exit code 2 and no traceback; workers share a port only among themselves."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.procs import BIN, Proc, clean_env

pytestmark = pytest.mark.system


@pytest.fixture
def taken() -> Iterator[int]:
    """A port held by a plain listening socket (no SO_REUSEPORT), as any other program would."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ration"), *argv],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_naming(result: subprocess.CompletedProcess[str], variable: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert variable in lines[0], lines[0]
    assert "in use" in lines[0], lines[0]


@pytest.mark.parametrize(
    ("argv", "variable"),
    [
        (["up"], "RATION_BUDGET_LISTEN"),
        (["up"], "RATION_MEMORY_LISTEN"),
        (["up"], "RATION_MEMORY_METRICS_LISTEN"),
        (["budget", "serve"], "RATION_BUDGET_LISTEN"),
        (["memory", "serve"], "RATION_MEMORY_METRICS_LISTEN"),
    ],
)
def test_a_taken_port_exits_2_with_one_line_naming_its_variable(
    argv: list[str], variable: str, taken: int, database_url: str
) -> None:
    result = run(argv, DATABASE_URL=database_url, **{variable: f"127.0.0.1:{taken}"})
    assert_one_line_naming(result, variable)
    assert f"127.0.0.1:{taken}" in result.stderr


def test_workers_refuse_a_port_another_process_holds(taken: int, database_url: str) -> None:
    result = run(
        ["budget", "serve"],
        DATABASE_URL=database_url,
        RATION_WORKERS="2",
        RATION_BUDGET_LISTEN=f"127.0.0.1:{taken}",
        RATION_BUDGET_METRICS_LISTEN="off",
    )
    assert_one_line_naming(result, "RATION_BUDGET_LISTEN")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("metrics", ["off", "on"])
def test_a_second_server_on_the_same_port_exits_2_instead_of_sharing_it(
    metrics: str, database_url: str
) -> None:
    port = free_port()
    env = {
        "DATABASE_URL": database_url,
        "RATION_WORKERS": "1",
        "RATION_BUDGET_LISTEN": f"127.0.0.1:{port}",
        "RATION_BUDGET_METRICS_LISTEN": "off" if metrics == "off" else f"127.0.0.1:{free_port()}",
    }
    first = Proc.start([str(BIN / "ration"), "budget", "serve"], clean_env(**env))
    try:
        first.wait_for("ready:")
        second = run(["budget", "serve"], **env)
    finally:
        assert first.stop(signal.SIGINT) == 0, first.stderr_tail()
    assert_one_line_naming(second, "RATION_BUDGET_LISTEN")


def test_workers_share_their_port_and_serve(database_url: str) -> None:
    port = free_port()
    env = clean_env(
        DATABASE_URL=database_url,
        RATION_WORKERS="2",
        RATION_BUDGET_LISTEN=f"127.0.0.1:{port}",
        RATION_BUDGET_METRICS_LISTEN="off",
    )
    proc = Proc.start([str(BIN / "ration"), "budget", "serve"], env)
    try:
        proc.wait_for("ready:")
        proc.wait_for("ready:")  # both workers bound the one port
    finally:
        assert proc.stop(signal.SIGINT) == 0, proc.stderr_tail()
