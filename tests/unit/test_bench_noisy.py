"""The noisy-neighbour figures: ratio, figure, console line, RESULTS.md; back-off; overlap."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2

from bench import budget as bench_budget
from bench import noisy_flow, noisy_notify, report, tenants
from bench.caller import DEFAULT_BACKOFF, MAX_BACKOFF, auth, backoff
from bench.load import LoadRun, LoadSpec, run_together
from bench.servers import start_echo


def _pairs(p50: float, p99: float, **extra: Any) -> dict[str, Any]:
    return {"status": "ok", "concurrency": 8, "p50_ms": p50, "p99_ms": p99, **extra}


def _append(p99: float) -> dict[str, Any]:
    return {"status": "ok", "concurrency": 2, "p50_ms": p99 / 2, "p99_ms": p99}


A_OK = {
    "scenario": "budget.report",
    "concurrency": 16,
    "status": "ok",
    "rpc_per_s": 22.5,
    "p50_ms": 500.0,
    "p99_ms": 3000.0,
    "errors": {"RESOURCE_EXHAUSTED TENANT_BUSY": 40},
    "methods": {"ReportSpend": {}},
}


def test_ratio_is_under_over_alone_or_none() -> None:
    assert noisy_flow.ratio(30.0, 10.0) == 3.0
    assert noisy_flow.ratio(10.0, 30.0) == 0.33
    assert noisy_flow.ratio(10.0, 0.0) is None
    assert noisy_flow.ratio(None, 10.0) is None
    assert noisy_flow.ratio(10.0, None) is None


def test_figure_from_b_alone_b_under_and_a() -> None:
    alone = [_pairs(5.0, 20.0, ops_per_s=100.0), _append(40.0)]
    under = [_pairs(9.0, 50.0, ops_per_s=80.0, errors={"DEADLINE_EXCEEDED": 1}), _append(60.0)]
    figure = noisy_flow.figure(alone, under, A_OK)
    assert figure["status"] == "ok"
    assert (figure["alone_p50_ms"], figure["alone_p99_ms"]) == (5.0, 20.0)
    assert (figure["under_p50_ms"], figure["under_p99_ms"]) == (9.0, 50.0)
    assert figure["ratio_p99"] == 2.5
    assert figure["met"] is False  # the pairs' 2.5 > 2
    assert figure["b_callers"] == 8
    assert figure["b_pairs_per_s"] == [100.0, 80.0]
    assert figure["b_errors"] == {"DEADLINE_EXCEEDED": 1}
    assert figure["b_appends"] == {
        "callers": 2,
        "status": "ok",
        "alone_p99_ms": 40.0,
        "under_p99_ms": 60.0,
        "ratio_p99": 1.5,
    }
    # What A achieved, without its per-method detail.
    assert figure["a"]["rpc_per_s"] == 22.5
    assert figure["a"]["errors"] == {"RESOURCE_EXHAUSTED TENANT_BUSY": 40}
    assert "methods" not in figure["a"]


def test_figure_fails_when_b_failed_and_says_why_appends_failed() -> None:
    failed = {"status": "failed", "reason": "no successful RPC"}
    alone = [_pairs(5.0, 20.0), _append(40.0)]
    figure = noisy_flow.figure(alone, [failed, _append(60.0)], A_OK)
    assert figure["status"] == "failed"
    assert figure["reason"] == "B under A: failed: no successful RPC"
    assert figure["a"]["rpc_per_s"] == 22.5
    timed_out = {**failed, "errors": {"DEADLINE_EXCEEDED": 36}}
    figure = noisy_flow.figure(alone, [_pairs(6.0, 30.0), failed], timed_out)
    assert figure["status"] == "ok"
    assert figure["ratio_p99"] == 1.5
    assert figure["b_appends"]["status"] == "failed"
    assert figure["b_appends"]["reason"] == "under A: failed: no successful RPC"
    assert figure["met"] is False  # B's appends never finished under A
    assert figure["a"] == {
        "status": "failed",
        "reason": "no call finished in its period",
        "errors": {"DEADLINE_EXCEEDED": 36},
    }
    line = noisy_flow.line("noisy.memory_writes", figure)
    assert line.endswith(
        "≤ 2: no; A failed: no call finished in its period (errors DEADLINE_EXCEEDED ×36)"
    )


def test_met_when_every_measured_ratio_of_b_is_within_two() -> None:
    assert noisy_flow.met(2.0, {"status": "ok", "ratio_p99": 1.9})
    assert not noisy_flow.met(2.01, {"status": "ok", "ratio_p99": 1.0})
    assert not noisy_flow.met(1.0, {"status": "ok", "ratio_p99": 2.2})
    assert not noisy_flow.met(None, {"status": "ok", "ratio_p99": 1.0})
    # Appends not measurable alone say nothing about A; never finishing under A is a no.
    assert noisy_flow.met(1.0, {"status": "failed", "reason": "alone: failed: x"})
    assert not noisy_flow.met(1.0, {"status": "failed", "reason": "under A: failed: x"})


def test_console_line_names_b_ratio_and_what_a_did() -> None:
    alone = [_pairs(5.0, 20.0), _append(40.0)]
    figure = noisy_flow.figure(alone, [_pairs(9.0, 50.0), _append(60.0)], A_OK)
    line = noisy_flow.line("noisy.reports", figure)
    assert "alone 5.0/20.0 ms" in line
    assert "under A 9.0/50.0 ms: x2.5" in line
    assert "B appends p99 x1.5" in line
    assert "B appends p99 x1.5; ≤ 2: no; A 22 RPC/s (RESOURCE_EXHAUSTED TENANT_BUSY ×40)" in line
    failed = noisy_flow.figure(alone, [{"status": "failed", "reason": "r"}, _append(1.0)], A_OK)
    assert noisy_flow.line("noisy.reports", failed).startswith(
        "noisy.reports                  failed: B under A: failed: r; A 22 RPC/s"
    )


def test_results_md_noisy_section(tmp_path: Path) -> None:
    alone = [_pairs(5.0, 20.0), _append(40.0)]
    ok = noisy_flow.figure(alone, [_pairs(9.0, 30.0), _append(60.0)], A_OK)
    slow = noisy_flow.figure(alone, [_pairs(9.0, 50.0), _append(60.0)], A_OK)
    notify = {
        "status": "ok",
        "rounds": 30,
        "alone_p50_ms": 100.0,
        "alone_p99_ms": 150.0,
        "under_p50_ms": 120.0,
        "under_p99_ms": 160.0,
        "ratio_p99": 1.07,
        "sigterm_exit_s": 0.4,
    }
    results: dict[str, Any] = {
        "config": {"mode": "test", "duration": 1.0, "warmup": 0.2},
        "machine": {},
        "ceilings": {},
        "figures": {},
        "noisy": {
            "noisy.reports": ok,
            "noisy.hot_runs": slow,
            "noisy.memory_writes": {"status": "failed", "reason": "boom", "a": A_OK},
            "noisy.notify": notify,
        },
        "sizing": {},
        "setup": {},
        "started_at": "now",
        "elapsed_s": 1.0,
    }
    text = report.write(results, tmp_path)["markdown"].read_text()
    assert "## Noisy neighbour" in text
    assert (
        "| noisy.reports | 5.00 / 20.00 | 9.00 / 30.00 | 1.50 | yes | A 22.50 RPC/s at 16 callers,"
        " errors RESOURCE_EXHAUSTED TENANT_BUSY ×40; B's appends p99 40.00 → 60.00 ms (1.50×) |"
    ) in text
    assert "| noisy.hot_runs | 5.00 / 20.00 | 9.00 / 50.00 | 2.50 | no |" in text
    assert "| noisy.memory_writes | failed: boom | | | | A 22.50 RPC/s" in text
    assert (
        "| noisy.notify | 100 / 150 | 120 / 160 | 1.07 | yes | 30 rounds; SIGTERM exit 0.40 s |"
        in text
    )
    appends_stuck = noisy_flow.figure(alone, [_pairs(9.0, 30.0), {"status": "failed"}], A_OK)
    results["noisy"] = {"noisy.memory_writes": appends_stuck}
    text = report.write(results, tmp_path)["markdown"].read_text()
    assert "| noisy.memory_writes | 5.00 / 20.00 | 9.00 / 30.00 | 1.50 | no |" in text
    assert "B's appends failed: under A: failed: " in text


def _exhausted(delay: Duration | None) -> grpc.aio.AioRpcError:
    status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="x")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason="TENANT_BUSY", domain="d"))
    if delay is not None:
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), trailing, details="x"
    )


def test_throttled_callers_wait_as_retry_info_says_within_bounds() -> None:
    assert backoff(_exhausted(Duration(nanos=200_000_000))) == 0.2
    assert backoff(_exhausted(None)) == DEFAULT_BACKOFF
    assert backoff(_exhausted(Duration(seconds=30))) == MAX_BACKOFF
    other = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="x"
    )
    assert backoff(other) is None


def test_tenants_tokens_and_call_metadata(tmp_path: Path) -> None:
    rows = json.loads(tenants.token_file(tmp_path / "t.json").read_text())["tokens"]
    assert [r["tenant"] for r in rows] == [tenants.NOISY, tenants.MEASURED]
    for row in rows:
        token = tenants.token(row["tenant"])
        assert row["sha256"] == hashlib.sha256(token.encode()).hexdigest()
        assert auth({"tenant": row["tenant"]}) == (("authorization", f"Bearer {token}"),)
    assert auth({}) is None


def test_seed_sql_copies_rows_with_fresh_identities() -> None:
    sql = noisy_flow.seed_ledger_sql("alpha", 7)
    assert sql.startswith("INSERT INTO budget.ledger OVERRIDING SYSTEM VALUE SELECT c.*")
    assert "generate_series(1, 7)" in sql
    assert "nextval(pg_get_serial_sequence('budget.ledger', 'entry_id'))" in sql
    assert "l.tenant_id = 'alpha'" in sql


def test_run_together_measures_each_load_of_an_overlap(tmp_path: Path) -> None:
    with start_echo(1, tmp_path / "logs") as server:
        server.wait_ready(timeout=30)
        outer = LoadSpec("echo", server.address, processes=1, concurrency=4, duration=1.2)
        inner = LoadSpec("echo", server.address, processes=1, concurrency=2, duration=0.5)
        results = run_together([(outer, 0.0), (inner, 0.3)])
    figures = [r.figure() for r in results]
    assert [f["status"] for f in figures] == ["ok", "ok"]
    assert [f["concurrency"] for f in figures] == [4, 2]
    assert all(f["rpcs"] > 0 for f in figures)


def test_a_load_spec_with_a_niceness_runs_its_processes_at_it(tmp_path: Path) -> None:
    """Tenant A's clients run at nice A_CLIENT_NICE (they stand for another customer's
    machines); a spec's processes take its niceness before they connect."""
    with start_echo(1, tmp_path / "logs") as server:
        server.wait_ready(timeout=30)
        spec = LoadSpec("echo", server.address, processes=2, concurrency=2, duration=0.3, nice=7)
        with LoadRun(spec) as run:
            run.wait_ready()
            base = os.getpriority(os.PRIO_PROCESS, 0)
            pids = [child.pid for child in run._children if child.pid is not None]
            assert len(pids) == 2
            assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == [base + 7] * 2
            run.go(time.monotonic() + 0.05)
            assert run.finish().figure()["status"] == "ok"


class _Config:
    """What NoisyFlow reads of the runner's configuration."""

    duration, warmup = 8.0, 1.0

    def spec(self, scenario: str, target: str, **kw: Any) -> LoadSpec:
        base = {"duration": self.duration, "warmup": self.warmup}
        return LoadSpec(scenario, target, **{**base, **kw})


def test_only_tenant_a_clients_are_niced() -> None:
    runner = type("Runner", (), {"config": _Config()})()
    flow = noisy_flow.NoisyFlow(runner, list(noisy_flow.NOISES), database=None)  # type: ignore[arg-type]
    for spec in flow.b_specs("b:1", "m:1"):
        assert spec.nice == 0
        assert spec.params["tenant"] == tenants.MEASURED
    for name in noisy_flow.NOISES:
        spec = flow.noise_spec(name, "b:1", "m:1")
        assert spec.nice == noisy_flow.A_CLIENT_NICE > 0
        assert spec.params["tenant"] == tenants.NOISY


def test_b_alone_is_measured_right_before_each_noise(monkeypatch: Any) -> None:
    """Each figure compares B alone and B under A measured back to back, not one B-alone
    window taken before every noise."""
    order: list[str] = []

    def fake_run_together(plan: list[tuple[LoadSpec, float]]) -> list[Any]:
        tenants_in = [spec.params.get("tenant") for spec, _ in plan]
        order.append("under" if tenants.NOISY in tenants_in else "alone")
        ok = {"status": "ok", "concurrency": 8, "p50_ms": 1.0, "p99_ms": 2.0, "rpc_per_s": 1.0}
        return [type("R", (), {"figure": lambda self: dict(ok)})() for _ in plan]

    recorded: dict[str, Any] = {}
    runner = type(
        "Runner",
        (),
        {
            "config": _Config(),
            "results": type("Results", (), {"noisy": recorded})(),
            "record": lambda self, where, name, figure: where.__setitem__(name, figure),
            "service": lambda self, *a, **k: _Served(),
            "postmaster": None,
        },
    )()
    monkeypatch.setattr(noisy_flow, "run_together", fake_run_together)
    monkeypatch.setattr(bench_budget, "open_runs", _nothing)
    flow = noisy_flow.NoisyFlow(runner, ["noisy.hot_runs", "noisy.memory_writes"], database=None)  # type: ignore[arg-type]
    flow.run()
    assert order == ["alone", "under", "alone", "under"]
    assert set(recorded) == {"noisy.hot_runs", "noisy.memory_writes"}
    for figure in recorded.values():  # each phase's cores, from this process standing in
        assert set(figure["cores"]) == {"alone", "under"}
        assert figure["cores"]["alone"]["budget"] is not None
        assert figure["cores"]["alone"]["postgres"] is None  # no postmaster known


def test_cores_used_per_part_between_two_readings() -> None:
    before = (10.0, {"budget": 100, "memory": 50, "postgres": None, "machine": 1000})
    after = (12.0, {"budget": 300, "memory": 50, "postgres": 40, "machine": 1360})
    assert noisy_flow.cores_used(before, after, 100) == {
        "budget": 1.0,
        "memory": 0.0,
        "postgres": None,  # not measured in one of the readings
        "machine": 1.8,
    }
    assert noisy_flow.cores_used(after, after, 100)["machine"] is None  # no time passed
    _, ticks = noisy_flow.core_ticks({"budget": [os.getpid()], "memory": []})
    assert ticks["budget"] is not None
    assert ticks["memory"] is None  # no process to measure
    assert ticks["machine"]


def test_results_md_noisy_note_shows_cores_alone_and_under_a(tmp_path: Path) -> None:
    alone = [_pairs(5.0, 20.0), _append(40.0)]
    ok = noisy_flow.figure(alone, [_pairs(9.0, 30.0), _append(60.0)], A_OK)
    ok["cores"] = {
        "alone": {"budget": 0.5, "memory": 0.55, "postgres": 0.6, "machine": 1.93},
        "under": {"budget": 0.6, "memory": 0.42, "postgres": None, "machine": 2.0},
    }
    note = report._noisy_note(ok)
    assert note.endswith(
        "; cores budget 0.50 → 0.60, memory 0.55 → 0.42, postgres 0.60 → —, machine 1.93 → 2.00"
    )


class _Served:
    address = "127.0.0.1:1"
    popen = type("Popen", (), {"pid": os.getpid()})()

    def __enter__(self) -> _Served:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


async def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def test_a_dripping_receiver_closed_mid_post_prints_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The notify figure ends with some of A's POSTs still dripping: their handlers are
    cancelled as the event loop closes, and asyncio's stream server logged each one's
    CancelledError traceback into the bench's output."""

    async def post_and_leave() -> None:
        receivers = noisy_notify.Receivers()
        async with receivers.serving() as (a_url, _):
            port = int(a_url.rsplit(":", 1)[1].split("/", 1)[0])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            await reader.readuntil(b"X-Drip: ")  # the answer has begun: it drips from now
            assert receivers.dripping == 1
        # The loop closes now, with the handler asleep between two drips.

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(post_and_leave())
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
