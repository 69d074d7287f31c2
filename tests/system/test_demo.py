"""`ration demo` on a fresh embedded database: threshold, breach, redaction, honest totals."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import BIN, ROOT, Proc, clean_env, embedded_data_dir, processes_mentioning

pytestmark = pytest.mark.system


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path


def test_demo_runs_to_a_breach_and_its_totals_match_get_run(data_dir: Path) -> None:
    result = subprocess.run(
        [str(BIN / "ration"), "demo"],
        cwd=ROOT,
        env=clean_env(RATION_DATA_DIR=str(data_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    # Its own embedded database beside RATION_DATA_DIR: never the one `make run` holds.
    assert f"postgres: embedded, data in {data_dir}-demo" in out
    assert not data_dir.exists()
    events = re.findall(r"event\s+(\d+) (\S+)", out)
    kinds = [kind for _, kind in events]
    assert [int(seq) for seq, _ in events] == list(range(1, len(events) + 1))
    assert kinds[0] == "budget.reserved"
    assert kinds[-3:] == ["budget.exhausted", "cap.breached", "run.failed"]
    crossed = kinds.index("budget.threshold.crossed")
    assert crossed < kinds.index("cap.breached"), "the warning comes before the breach"
    assert "BREACH budget-cost" in out
    assert "refused: BUDGET_EXHAUSTED (cost)" in out
    assert re.search(r"memory after the run: .*\[REDACTED:booking_api_key\]", out)
    assert "sk-live-" not in out, "the secret never comes back"
    rows = dict(
        (m[0], (m[1], m[2]))
        for m in re.findall(r"^(cost \(USD\)|tool calls|tokens)\s+(\S+)\s+(\S+)", out, re.M)
    )
    assert set(rows) == {"cost (USD)", "tool calls", "tokens"}
    for billed, consumed in rows.values():
        assert billed == consumed
    assert "run state: FAILED budget_exhausted" in out
    assert processes_mentioning(str(data_dir)) == []


def test_demo_after_a_sigkilled_demo_stops_the_postgres_it_took_over(data_dir: Path) -> None:
    demo_dir = f"{data_dir}-demo"  # the demo's own data directory (never `make run`'s)
    killed = Proc.start([str(BIN / "ration"), "demo"], clean_env(RATION_DATA_DIR=str(data_dir)))
    try:
        killed.wait_for(" event ")
    finally:
        killed.stop(signal.SIGKILL)
    assert processes_mentioning(demo_dir), "SIGKILL leaves the embedded postgres behind"
    result = subprocess.run(
        [str(BIN / "ration"), "demo"],
        cwd=ROOT,
        env=clean_env(RATION_DATA_DIR=str(data_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert processes_mentioning(str(data_dir)) == []


def test_ctrl_c_during_the_demo_exits_130_and_leaves_nothing(data_dir: Path) -> None:
    proc = Proc.start([str(BIN / "ration"), "demo"], clean_env(RATION_DATA_DIR=str(data_dir)))
    proc.wait_for(" event ")
    code = proc.stop(signal.SIGINT)
    assert code == 130, proc.stderr_tail()
    assert proc.rest_of_stdout()[-1:] == ["interrupted"]
    errors = proc.stderr_tail()
    for text in ("Traceback", "never awaited", "Event loop is closed"):
        assert text not in errors, errors
    assert processes_mentioning(str(data_dir)) == []
