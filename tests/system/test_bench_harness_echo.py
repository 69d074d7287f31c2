"""~1 s of echo through the real bench harness (server and load processes), and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.load import LoadSpec, run_load
from bench.meter import Meter, cpu_per_rpc
from bench.servers import start_echo
from bench.targets import TARGETS

pytestmark = pytest.mark.system


def _ok(**metrics: float) -> dict[str, Any]:
    return {"status": "ok", **metrics}


def test_echo_through_the_real_harness_and_report(tmp_path: Path) -> None:
    with start_echo(2, tmp_path / "logs") as server:
        server.wait_ready(timeout=30)
        spec = LoadSpec("echo", server.address, processes=2, concurrency=8, duration=1.0)
        meter = Meter(server=[server.popen.pid])  # no Postgres: that part is not measured
        result = run_load(LoadSpec(**{**spec.__dict__, "warmup": 0.2}), meter)
    figure = result.figure()
    assert figure["status"] == "ok", figure
    assert result.marks is not None
    assert result.tally.window_rpcs > 0
    cpu = cpu_per_rpc(*result.marks, result.rpcs_per_s, meter.hz)
    assert cpu["server_ms_per_rpc"] > 0
    assert cpu["load_ms_per_rpc"] > 0
    assert cpu["postgres_ms_per_rpc"] is None
    assert cpu["total_ms_per_rpc"] is None
    figure.update(cpu)
    assert figure["rpcs"] > 0
    assert figure["rpcs"] == figure["ops"] == figure["methods"]["Echo"]["count"]
    assert figure["rpc_per_s"] > 0
    assert 0 < figure["p50_ms"] <= figure["p99_ms"] <= figure["max_ms"]
    assert figure["errors"] == {}

    pytest.importorskip("matplotlib")
    sized = {
        f"memory.append.{n}": _ok(rpc_per_s=100, p50_ms=n / 1_000, p99_ms=n / 500)
        for n in (200, 1_000, 5_000)
    }
    results: dict[str, Any] = {
        "config": {"mode": "test", "duration": 1.0, "warmup": 0.2},
        "machine": {"nproc": 2},
        "ceilings": {"echo": {**figure, "server_workers": 2}},
        "figures": sized,
        "setup": {},
        "started_at": "now",
        "elapsed_s": 1.0,
    }
    paths = report.write(results, tmp_path / "out")
    written = json.loads(paths["json"].read_text())
    assert written["ceilings"]["echo"]["rpcs"] == figure["rpcs"]
    assert len(written["targets"]) == len(TARGETS)
    text = paths["markdown"].read_text()
    for heading in ("## Machine", "## Targets", "## Ceilings", "## Figures", "## CPU per RPC"):
        assert heading in text
    assert "| memory.append.5000 | 100 |" in text
    assert paths["chart"].read_bytes().startswith(b"\x89PNG")
