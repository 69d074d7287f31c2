"""The bench harness: percentiles, merging, targets (the echo run: tests/system)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from bench import report
from bench.caller import describe, unavailable
from bench.load import split
from bench.stats import Histogram, nearest_rank
from bench.targets import evaluate


def test_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert nearest_rank(values, 50) == 3.0
    assert nearest_rank(values, 100) == 5.0
    assert nearest_rank(values, 1) == 1.0
    assert nearest_rank(list(range(1, 101)), 99) == 99
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 50)


def test_histogram_percentiles_within_one_percent() -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(-6, 1.0) for _ in range(20_000)]
    hist = Histogram.of(samples)
    assert hist.count == len(samples)
    for q in (50, 90, 99, 99.9):
        exact = nearest_rank(samples, q)
        assert abs(hist.percentile(q) - exact) / exact < 0.011
    assert hist.percentile(100) == max(samples)
    assert hist.percentile(50) <= hist.percentile(99)
    assert hist.mean_seconds == pytest.approx(sum(samples) / len(samples))


def test_histogram_merge_equals_one_histogram_of_everything() -> None:
    rng = random.Random(3)
    parts = [[rng.uniform(1e-4, 5e-2) for _ in range(1_000)] for _ in range(4)]
    merged = Histogram()
    for part in parts:
        merged.merge(Histogram.of(part))
    whole = Histogram.of(x for part in parts for x in part)
    assert merged.buckets == whole.buckets
    assert merged.count == whole.count == 4_000
    assert merged.min_seconds == whole.min_seconds
    assert merged.max_seconds == whole.max_seconds
    for q in (50, 99):
        assert merged.percentile(q) == whole.percentile(q)


def test_empty_histogram_has_no_percentile() -> None:
    with pytest.raises(ValueError, match="empty"):
        Histogram().percentile(50)


def test_split_spreads_callers_evenly() -> None:
    assert split(64, 3) == [22, 21, 21]
    assert split(2, 4) == [1, 1, 0, 0]
    assert sum(split(1_000, 7)) == 1_000


def _error(code: grpc.StatusCode, reason: str = "") -> grpc.aio.AioRpcError:
    trailing: list[tuple[str, str | bytes]] = []
    if reason:
        status = status_pb2.Status(code=code.value[0], message="x")
        status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="d"))
        trailing.append(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details="x"
    )


def test_unavailable_answers_are_recognised() -> None:
    assert unavailable(_error(grpc.StatusCode.UNIMPLEMENTED)) == "UNIMPLEMENTED (x)"
    relevance = _error(grpc.StatusCode.FAILED_PRECONDITION, "RELEVANCE_UNAVAILABLE")
    assert unavailable(relevance) == "FAILED_PRECONDITION RELEVANCE_UNAVAILABLE"
    held = _error(grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_HELD")
    assert unavailable(held) is None
    assert describe(held) == "RESOURCE_EXHAUSTED BUDGET_HELD"
    assert describe(_error(grpc.StatusCode.INTERNAL)) == "INTERNAL"


def _ok(**metrics: float) -> dict[str, Any]:
    return {"status": "ok", **metrics}


def test_targets_met_not_met_and_not_available() -> None:
    results = {
        "ceilings": {"echo": _ok(rpc_per_s=1_000, p99_ms=10)},
        "figures": {
            "budget.pairs_spread": _ok(rpc_per_s=600),
            "budget.pairs_hot": _ok(rpc_per_s=300),
            "budget.check": {"status": "not available", "reason": "UNIMPLEMENTED"},
        },
    }
    rows = {row["numerator"].rsplit(".", 1)[0]: row for row in evaluate(results)}
    assert rows["budget.pairs_spread"]["status"] == "met"
    assert rows["budget.pairs_spread"]["ratio"] == 0.6
    assert rows["budget.pairs_hot"]["status"] == "not met"
    assert rows["budget.pairs_hot"]["shortfall"] == "needs 1.60× better"
    assert rows["budget.check"]["status"] == "not available"
    assert "UNIMPLEMENTED" in rows["budget.check"]["reason"]
    assert rows["memory.append.5000"]["status"] == "not available"


def test_command_line_modes_and_output_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.__main__ import HERE, parse

    monkeypatch.delenv("BENCH_WORKERS", raising=False)
    config, out = parse([])
    assert (config.mode, config.duration, config.workers, out) == ("full", 8.0, 2, HERE)
    config, out = parse(["--quick", "--workers", "3", "--only", "echo,budget.check"])
    assert (config.mode, config.duration, config.workers) == ("quick", 1.5, 3)
    assert out == HERE / "results" / "partial"
    assert config.selected("budget.check")
    assert not config.selected("budget.pairs_hot")
    assert config.append_plan(200) == (50, 5)
    assert config.append_plan(5_000) == (250, 1)
    with pytest.raises(SystemExit):
        parse(["--only", "nonsense"])


def test_rates_count_only_completions_inside_the_window() -> None:
    from bench.caller import Tally

    tally = Tally()
    window = (10.0, 12.0)
    for done in (9.9, 10.0, 11.0, 11.5, 12.0, 12.3):
        tally.completed(done, window, rpcs=False)
    tally.completed(11.0, window, rpcs=True)
    assert (tally.window_ops, tally.window_rpcs, tally.last_in_window) == (4, 1, 12.0)


def test_sizing_figure_reports_every_worst_case_kind_beside_tiktoken(tmp_path: Path) -> None:
    from bench.sizing import measure, worst_case_texts

    texts = worst_case_texts()
    assert sorted(texts) == ["base64", "cjk", "dna", "emoji"]
    for text in texts.values():
        assert 65_536 - 4 < len(text.encode()) <= 65_536
        assert not any(c.isspace() for c in text)
    figure = measure(size_bytes=4_096, repeats=1)
    assert figure["status"] == "ok"
    assert set(figure["kinds"]) == set(texts)
    for kind in figure["kinds"].values():
        assert kind["ours_ms"] > 0
        assert kind["tiktoken_ms"] > 0
        assert kind["tokens"]["o200k_base"] > 0
    assert figure["worst_ms"] == max(k["ours_ms"] for k in figure["kinds"].values())
    results: dict[str, Any] = {
        "config": {"mode": "test", "duration": 1.0, "warmup": 0.2},
        "machine": {},
        "ceilings": {},
        "figures": {},
        "sizing": figure,
        "setup": {},
        "started_at": "now",
        "elapsed_s": 1.0,
    }
    text = report.write(results, tmp_path)["markdown"].read_text()
    assert "## Entry sizing (worst case)" in text
    assert f"Worst case: **{figure['worst']}**" in text
    for kind in texts:
        assert f"| {kind} | " in text


def test_a_floor_ceiling_renders_without_a_rate_of_its_own() -> None:
    ceilings = {
        "floor.pair_1": {
            "status": "ok",
            "scenario": "2 × echo_1 p50 + 2 × pgbench.one p50",
            "p50_ms": 5.62,
        },
    }
    rows = report._ceilings({"ceilings": ceilings})
    assert "| floor.pair_1 | — | 5.62 | — | 2 × echo_1 p50 + 2 × pgbench.one p50 |" in rows
