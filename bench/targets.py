"""The issue 8 targets: ratios of two figures measured in the same run, met or not met."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Ref = tuple[str, str]  # (figure or ceiling name, metric)


@dataclass(frozen=True)
class Target:
    label: str
    numerator: Ref
    denominator: Ref
    op: str  # ">=" or "<="
    bound: float


TARGETS = (
    Target(
        "Reserve+Consume, 1,000 runs, 64 callers: RPC/s ÷ echo RPC/s",
        ("budget.pairs_spread", "rpc_per_s"),
        ("echo", "rpc_per_s"),
        ">=",
        0.5,
    ),
    Target(
        "same on one hot run ÷ spread over 1,000 runs (RPC/s)",
        ("budget.pairs_hot", "rpc_per_s"),
        ("budget.pairs_spread", "rpc_per_s"),
        ">=",
        0.8,
    ),
    Target(
        "Check p99 ÷ echo p99 at equal concurrency",
        ("budget.check", "p99_ms"),
        ("echo", "p99_ms"),
        "<=",
        1.5,
    ),
    Target(
        "Reserve+Consume at one caller: pair p50 ÷ floor (2 echo p50 + 2 one-client commits)",
        ("budget.pairs_1", "op_p50_ms"),
        ("floor.pair_1", "p50_ms"),
        "<=",
        3.0,
    ),
    Target(
        "Postgres CPU per RPC, tenant of 100k runs and 1M holds ÷ the fresh tenant",
        ("budget.pairs_big_tenant", "postgres_ms_per_rpc"),
        ("budget.pairs_spread", "postgres_ms_per_rpc"),
        "<=",
        1.2,
    ),
    Target(
        "hot run after 100k pairs ÷ the fresh hot run (RPC/s)",
        ("budget.pairs_hot_big", "rpc_per_s"),
        ("budget.pairs_hot", "rpc_per_s"),
        ">=",
        0.83,
    ),
    Target(
        "ListMemory (5,000, budget 800, o200k, recency) RPC/s ÷ echo RPC/s",
        ("memory.list_recency.5000", "rpc_per_s"),
        ("echo", "rpc_per_s"),
        ">=",
        0.5,
    ),
    Target(
        "ListMemory p50 at 5,000 entries ÷ at 200 entries",
        ("memory.list_recency.5000", "p50_ms"),
        ("memory.list_recency.200", "p50_ms"),
        "<=",
        1.2,
    ),
    Target(
        "AppendEntries p50 at 5,000 entries ÷ at 200 entries",
        ("memory.append.5000", "p50_ms"),
        ("memory.append.200", "p50_ms"),
        "<=",
        1.2,
    ),
    Target(
        "AppendEntries p50 at 5,000 ÷ at 200 entries, never-analyzed database",
        ("memory.append_fresh.5000", "p50_ms"),
        ("memory.append_fresh.200", "p50_ms"),
        "<=",
        1.2,
    ),
    Target(
        "ListMemory relevance p99 ÷ recency p99 (5,000 entries)",
        ("memory.list_relevance.5000", "p99_ms"),
        ("memory.list_recency.5000", "p99_ms"),
        "<=",
        5.0,
    ),
)


def lookup(results: dict[str, Any], ref: Ref) -> tuple[float | None, str]:
    """The metric's value, or None and why it is missing."""
    name, metric = ref
    figure = results.get("ceilings", {}).get(name) or results.get("figures", {}).get(name)
    if figure is None:
        return None, f"{name} not measured"
    if figure.get("status") != "ok":
        return None, f"{name} {figure.get('status')}: {figure.get('reason', '')}"
    value = figure.get(metric)
    if not isinstance(value, int | float) or value <= 0:
        return None, f"{name} has no {metric}"
    return float(value), ""


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for target in TARGETS:
        num, why_num = lookup(results, target.numerator)
        den, why_den = lookup(results, target.denominator)
        row: dict[str, Any] = {
            "target": target.label,
            "numerator": ".".join(target.numerator),
            "denominator": ".".join(target.denominator),
            "bound": f"{'≥' if target.op == '>=' else '≤'} {target.bound:g}",
        }
        if num is None or den is None:
            out.append({**row, "status": "not available", "reason": why_num or why_den})
            continue
        ratio = num / den
        met = ratio >= target.bound if target.op == ">=" else ratio <= target.bound
        row.update(value=num, against=den, ratio=round(ratio, 3))
        row["status"] = "met" if met else "not met"
        if not met:
            # How far off, as the factor the ratio must still improve by.
            factor = target.bound / ratio if target.op == ">=" else ratio / target.bound
            row["shortfall"] = f"needs {factor:.2f}× better"
        out.append(row)
    return out
