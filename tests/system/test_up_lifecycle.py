"""`ration up` on its embedded Postgres, stopped at any moment: Ctrl-C, SIGKILL, a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import BIN, ROOT, Proc, clean_env, embedded_data_dir, processes_mentioning

pytestmark = pytest.mark.system

UNCLEAN = ("Traceback", "never awaited", "Event loop is closed")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path


def up(data_dir: Path) -> Proc:
    return Proc.start([str(BIN / "ration"), "up"], clean_env(RATION_DATA_DIR=str(data_dir)))


def assert_clean(proc: Proc, data_dir: Path) -> None:
    errors = proc.stderr_tail()
    for text in UNCLEAN:
        assert text not in errors, errors
    assert processes_mentioning(str(data_dir)) == [], "the embedded postgres is left running"


# Where the SIGINT lands: stdout lines are the console, stderr lines the (JSON) log. Not right
# after the spawn: until the interpreter runs the console script, a SIGINT is Python's own (it
# dies of the signal, or prints a KeyboardInterrupt from inside `site`); from the script's first
# line on, ration_server.entry has made a signal a stop request.
POINTS = {
    "postgres starting": ("stdout", "postgres: embedded"),  # importing pgserver, initdb
    "initdb running": ("process", "bin/initdb"),  # Ctrl-C reaches initdb too, which gives up
    "pg_ctl starting": ("process", "bin/pg_ctl"),  # pg_ctl passes it on to the new postmaster
    "postgres started": ("stderr", "embedded postgres started"),  # servers binding
    "migrating": ("stderr", "migration applied"),
    "ready": ("stdout", "ready:"),
}


def wait_for_process(name: str, data_dir: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not any(name in cmdline for cmdline in processes_mentioning(str(data_dir))):
        assert time.monotonic() < deadline, f"no {name} process for {data_dir}"
        time.sleep(0.01)


@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_at_any_moment_of_the_start_stops_everything_cleanly(
    point: str, data_dir: Path
) -> None:
    proc = up(data_dir)
    stream, marker = POINTS[point]
    if stream == "process":
        wait_for_process(marker, data_dir)
    else:
        (proc.wait_for if stream == "stdout" else proc.wait_for_stderr)(marker)
    code = proc.stop(signal.SIGINT)
    assert code == 0, proc.stderr_tail()  # a stop at any moment of the start is a normal end
    assert proc.rest_of_stdout()[-1:] == ["stopped"]
    assert_clean(proc, data_dir)
    # Whatever the moment, the data directory still serves the next start.
    again = up(data_dir)
    try:
        again.wait_for("ready:")
    finally:
        assert again.stop(signal.SIGINT) == 0, again.stderr_tail()
    assert_clean(again, data_dir)


def test_after_a_sigkilled_run_the_next_ctrl_c_stops_the_embedded_postgres(
    data_dir: Path,
) -> None:
    killed = up(data_dir)
    try:
        killed.wait_for("ready:")
    finally:
        killed.stop(signal.SIGKILL)
    assert processes_mentioning(str(data_dir)), "SIGKILL leaves the embedded postgres behind"
    handles = json.loads((data_dir / ".handle_pids.json").read_text())
    assert killed.popen.pid in handles, "pgserver keeps the dead process's handle"

    again = up(data_dir)
    try:
        again.wait_for("ready:")
    finally:
        code = again.stop(signal.SIGINT)
    assert code == 0, again.stderr_tail()
    assert "embedded postgres stopped" in again.stderr_tail()
    assert_clean(again, data_dir)
    assert killed.popen.pid not in json.loads((data_dir / ".handle_pids.json").read_text())


def test_in_a_terminal_logs_are_text_and_the_ready_banner_is_the_last_startup_line(
    data_dir: Path,
) -> None:
    env = clean_env(RATION_DATA_DIR=str(data_dir))
    env.pop("RATION_LOG_FORMAT", None)
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [str(BIN / "ration"), "up"],
        cwd=ROOT,
        env=env,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        interrupted = False
        while time.monotonic() < deadline:
            if not interrupted and b"ready:" in seen:
                os.killpg(proc.pid, signal.SIGINT)
                interrupted = True
            readable, _, _ = select.select([controller], [], [], 1)
            if readable:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(controller)
    lines = seen.decode().replace("\r", "").splitlines()
    assert code == 0, lines
    assert not any(line.lstrip().startswith("{") for line in lines), "no JSON in a terminal"
    assert any("migration applied" in line and "migration=" in line for line in lines), lines
    ready = next(i for i, line in enumerate(lines) if line.startswith("ready:"))
    # The start's objects were frozen out of the collector's scans once all served.
    assert any("heap settled" in line for line in lines[:ready]), lines
    assert [line.split(":")[0] for line in lines[ready - 2 : ready]] == [
        "budget_service",
        "memory_service",
    ], lines
    # Nothing of the start comes after the banner: only the shutdown's lines do.
    assert all("stopped" in line for line in lines[ready + 1 :]), lines[ready:]
    assert processes_mentioning(str(data_dir)) == []
