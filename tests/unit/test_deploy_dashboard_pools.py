"""The budget dashboard shows every pool unit, says a ranked line is not one pool, and counts
neither refusals nor client cancels as RPC errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards"
ANSWERS = ("RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "CANCELLED")


def panels(name: str) -> Iterator[dict[str, Any]]:
    board = json.loads((DASHBOARDS / f"{name}.json").read_text())
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel.get("targets", [])]


@pytest.mark.parametrize("unit", ["tokens", "usd", "tool_calls", "retries", "model_calls"])
def test_every_pool_unit_has_a_panel_with_its_limit(unit: str) -> None:
    shown = [p for p in panels("budget") if any(f"pool_remaining_{unit}{{" in e for e in exprs(p))]
    assert shown, unit
    assert any(f"pool_limit_{unit}{{" in e for p in shown for e in exprs(p))


def test_pool_panels_say_a_line_is_a_rank_not_a_pool() -> None:
    pool_panels = [p for p in panels("budget") if any("ration_budget_pool_" in e for e in exprs(p))]
    assert len(pool_panels) >= 6
    for panel in pool_panels:
        assert "A line is a rank, not a pool" in panel["description"], panel["title"]
        assert "RATION_METRICS_TENANT_LABELS" in panel["description"], panel["title"]


@pytest.mark.parametrize("name", ["budget", "memory"])
def test_rpc_errors_by_code_leave_out_answers_and_cancels(name: str) -> None:
    panel = next(p for p in panels(name) if p["title"] == "RPC errors by code")
    (expr,) = exprs(panel)
    assert 'grpc_code!="OK"' not in expr
    excluded = expr.split('grpc_code!~"', 1)[1].split('"', 1)[0].split("|")
    assert set(excluded) == {"OK", *ANSWERS}
    for code in ANSWERS:
        assert code in panel["description"]
