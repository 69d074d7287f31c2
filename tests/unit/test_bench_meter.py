"""bench/meter.py and its report: metric deltas, CPU per RPC of each part, mean batch size."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.meter import Snapshot, cpu_per_rpc, mean_batch_size, metric_totals, shown

EXPOSITION = """\
# HELP ration_budget_decide_batch_size Items per decide_v1 call.
# TYPE ration_budget_decide_batch_size histogram
ration_budget_decide_batch_size_bucket{le="1.0"} 3.0
ration_budget_decide_batch_size_bucket{le="+Inf"} 10.0
ration_budget_decide_batch_size_sum 42.0
ration_budget_decide_batch_size_count 10.0
grpc_server_handled_total{grpc_method="Reserve",grpc_code="OK"} 7.0
grpc_server_handled_total{grpc_method="Odd",detail="a} b"} 2.0
grpc_server_handled_total_other 100.0
"""
SUM, COUNT = "ration_budget_decide_batch_size_sum", "ration_budget_decide_batch_size_count"


def test_metric_totals_sum_every_label_set_and_skip_other_names() -> None:
    totals = metric_totals(EXPOSITION, [SUM, COUNT, "grpc_server_handled_total", "absent"])
    assert totals == {SUM: 42.0, COUNT: 10.0, "grpc_server_handled_total": 9.0}


def test_mean_batch_size_is_the_delta_of_sum_over_the_delta_of_count() -> None:
    before = {SUM: 42.0, COUNT: 10.0}
    assert mean_batch_size(before, {SUM: 72.0, COUNT: 20.0}) == 3.0
    # A labelled series first observed inside the window counts from zero.
    assert mean_batch_size({}, {SUM: 9.0, COUNT: 4.0}) == 2.25


def test_mean_batch_size_is_unknown_without_the_metric_or_without_batches() -> None:
    assert mean_batch_size({}, {}) is None  # main before the batcher: no such metric
    assert mean_batch_size({SUM: 1.0, COUNT: 1.0}, {SUM: 1.0, COUNT: 1.0}) is None
    assert mean_batch_size(None, {SUM: 1.0, COUNT: 1.0}) is None  # a scrape failed
    assert shown(None) == "n/a"
    assert shown(2.345) == "2.35"


def _snap(at: float, server: int, postgres: int | None, load: int, busy: int) -> Snapshot:
    return Snapshot(at, {"server": server, "postgres": postgres, "load": load}, busy)


def test_cpu_per_rpc_divides_each_parts_ticks_by_the_rpcs_of_the_interval() -> None:
    # 100 ticks/s; 125 RPC/s over 8 s = 1,000 RPCs; server 80 ticks = 0.8 s -> 0.8 ms per RPC.
    before, after = _snap(10.0, 500, 900, 40, 10_000), _snap(18.0, 580, 960, 60, 10_170)
    cpu = cpu_per_rpc(before, after, rpc_per_s=125.0, hz=100)
    assert cpu == {
        "cpu_interval_s": 8.0,
        "cpu_rpcs": 1_000,
        "server_ms_per_rpc": 0.8,
        "postgres_ms_per_rpc": 0.6,
        "load_ms_per_rpc": 0.2,
        "total_ms_per_rpc": 1.6,
        "other_ms_per_rpc": 0.1,
    }


def test_a_part_that_cannot_be_measured_is_none_and_so_are_total_and_other() -> None:
    before, after = _snap(0.0, 0, None, 0, 0), _snap(1.0, 10, None, 5, 40)
    cpu = cpu_per_rpc(before, after, rpc_per_s=100.0, hz=100)
    assert cpu["postgres_ms_per_rpc"] is None
    assert cpu["server_ms_per_rpc"] == 1.0
    assert cpu["total_ms_per_rpc"] is None
    assert cpu["other_ms_per_rpc"] is None
    assert cpu_per_rpc(before, after, 0.0, hz=100) == {"cpu_interval_s": 1.0, "cpu_rpcs": 0}


def _figure(callers: int, total: float, **extra: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "concurrency": callers,
        "rpc_per_s": 1_000.0,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "cpu_rpcs": 8_000,
        "server_ms_per_rpc": total / 2,
        "postgres_ms_per_rpc": total / 4,
        "load_ms_per_rpc": total / 4,
        "total_ms_per_rpc": total,
        "other_ms_per_rpc": 0.05,
        **extra,
    }


def test_cpu_table_compares_with_echo_at_the_same_callers_and_shows_batches() -> None:
    results: dict[str, Any] = {
        "config": {"mode": "test", "duration": 1.0, "warmup": 0.2},
        "machine": {},
        "targets": [],
        "ceilings": {"echo": _figure(64, 0.4), "echo_16": _figure(16, 0.8)},
        "figures": {
            "budget.pairs_spread": _figure(64, 1.6, mean_batch_size=None),
            "budget.pairs_spread_16": _figure(16, 1.6, mean_batch_size=3.5),
            "memory.append.200": _figure(1, 3.0),
        },
        "started_at": "now",
        "elapsed_s": 1.0,
    }
    text = report.markdown(results, chart_drawn=False)
    table = text[text.index("## CPU per RPC") :]
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ")}
    assert rows["echo"] == "| echo | 64 | 8,000 | 0.20 | 0.10 | 0.10 | 0.40 | 0.05 | 1.00 | — |"
    assert rows["budget.pairs_spread"].endswith("| 1.60 | 0.05 | 0.25 | n/a |")
    assert rows["budget.pairs_spread_16"].endswith("| 1.60 | 0.05 | 0.50 | 3.50 |")
    assert rows["memory.append.200"].endswith("| — | — |")  # no echo at one caller
