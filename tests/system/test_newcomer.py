"""The newcomer path as the README tells it, on a machine where an earlier run was SIGKILLed."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.procs import BIN, ROOT, Proc, clean_env, embedded_data_dir, processes_mentioning

pytestmark = pytest.mark.system


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        return int(reply.status)


UNCLEAN = ("Traceback", "never awaited", "Event loop is closed")


def tour_code() -> str:
    """The README's tour block (as tests/api/test_readme_tour.py reads it)."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- tour:begin -->\n```python\n(.*?)```\n<!-- tour:end -->", readme, re.S)
    assert block, "README.md lost its tour block"
    return block.group(1)


def assert_no_traceback(stderr: str) -> None:
    for text in UNCLEAN:
        assert text not in stderr, stderr[-3000:]


def test_newcomer_path_after_a_sigkilled_run_prints_no_traceback_and_leaves_nothing(
    data_dir: Path,
) -> None:
    """`make run`, the README tour, `ration demo` (alone and against the stack), Ctrl-C, on the
    data directory of an earlier run that was killed with SIGKILL."""
    killed = Proc.start([str(BIN / "ration"), "up"], clean_env(RATION_DATA_DIR=str(data_dir)))
    try:
        killed.wait_for("ready:")
    finally:
        killed.stop(signal.SIGKILL)
    assert processes_mentioning(str(data_dir)), "the killed run's postgres is still there"

    env = clean_env(RATION_DATA_DIR=str(data_dir))
    proc = Proc.start(["make", "--no-print-directory", "run"], env)
    try:
        proc.wait_for("ready:")
        tour = subprocess.run(
            [str(BIN / "python"), "-c", tour_code()],
            env={
                **env,
                "RATION_BUDGET_ADDRESS": proc.addresses["budget"],
                "RATION_MEMORY_ADDRESS": proc.addresses["memory"],
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tour.returncode == 0, tour.stderr[-3000:]
        assert_no_traceback(tour.stderr)
        for argv in (
            ["demo"],  # its own stack, on an embedded postgres of its own
            ["demo", "--budget", proc.addresses["budget"], "--memory", proc.addresses["memory"]],
        ):
            demo = subprocess.run(
                [str(BIN / "ration"), *argv],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert demo.returncode == 0, demo.stderr[-3000:]
            assert "run state: FAILED budget_exhausted" in demo.stdout
            assert_no_traceback(demo.stderr)
        # The demo left the server to `make run`, which still holds it.
        assert health(proc.addresses["budget"]) == health_pb2.HealthCheckResponse.SERVING
    finally:
        code = proc.stop(signal.SIGINT)
    assert code in (0, -signal.SIGINT), proc.stderr_tail()
    assert proc.rest_of_stdout()[-1:] == ["stopped"]
    assert_no_traceback(proc.stderr_tail())
    assert processes_mentioning(str(data_dir)) == []
