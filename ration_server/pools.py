"""`ration pools`: list, show, put and delete the pooled budgets of a running budget service."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation

from ration_client import (
    BudgetClient,
    DimensionStatus,
    Enforcement,
    Policy,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)

SCOPES = [Scope.PROJECT.value, Scope.WORKFLOW.value, Scope.AGENT.value]
UNBOUNDED = "-"


def _usd(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of USD (0.25)") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of USD (0.25)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        help="budget service address (default: RATION_BUDGET_ADDRESS, else 127.0.0.1:50051)",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every pool, or those of one scope or window")
    listing.add_argument("--scope", choices=SCOPES)
    listing.add_argument("--window", choices=[w.value for w in Window])
    for name, what in (("show", "a pool and its current window"), ("delete", "delete a pool")):
        sub = actions.add_parser(name, help=what)
        sub.add_argument("scope", choices=SCOPES)
        sub.add_argument("scope_id")
    put = actions.add_parser("put", help="create or replace a pool (its limits apply at once)")
    put.add_argument("scope", choices=SCOPES)
    put.add_argument("scope_id")
    put.add_argument("--window", choices=[w.value for w in Window], default=Window.NONE.value)
    put.add_argument("--max-cost", type=_usd, help="USD per window")
    put.add_argument("--max-tokens", type=int)
    put.add_argument("--max-tool-calls", type=int)
    put.add_argument("--max-retries", type=int)
    put.add_argument("--max-model-calls", type=int, help="model calls (Reserves) per window")
    put.add_argument("--model-match", default="", help="only calls whose model matches the glob")
    put.add_argument("--threshold", type=int, help="percent of a limit that raises the alert")
    put.add_argument("--advisory", action="store_true", help="refuse nothing, report only")


def _limit(value: object) -> str:
    return UNBOUNDED if value is None else str(value)


def _limits(pool: ScopeBudget) -> list[str]:
    p = pool.policy
    values = (p.max_cost, p.max_tokens, p.max_tool_calls, p.max_retries, pool.max_model_calls)
    return [_limit(v) for v in values]


LIST_HEADER = (
    "scope", "id", "window", "enforcement", "cost (USD)", "tokens", "tool calls", "retries",
    "model calls", "model match", "version",
)  # fmt: skip


def table(header: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    return [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *cells]
    ]


def list_lines(pools: Sequence[ScopeBudget]) -> list[str]:
    cells = [
        [
            p.scope.value,
            p.scope_id,
            p.window.value,
            p.enforcement.value,
            *_limits(p),
            p.model_match or '""',
            str(p.version),
        ]
        for p in pools
    ]
    return table(LIST_HEADER, cells)


def _status(s: DimensionStatus) -> list[str]:
    return [s.dimension.value, _limit(s.limit), str(s.consumed), str(s.held), _limit(s.remaining)]


def show_lines(pool: ScopeBudget) -> list[str]:
    lines = list_lines([pool])
    if pool.balance is not None:
        start = pool.balance.window_start.isoformat()
        ends = {s.window_end for s in pool.balance.dimensions if s.window_end is not None}
        end = f" until {min(ends).isoformat()}" if ends else ""
        lines += ["", f"window from {start}{end}"]
        header = ("dimension", "limit", "consumed", "held", "remaining")
        lines += table(header, [_status(s) for s in pool.balance.dimensions])
    return lines


async def run_pools(
    args: argparse.Namespace, *, token: str | None, say: Callable[[str], None] = print
) -> None:
    async with BudgetClient(args.budget, token=token) as budget:
        if args.action == "list":
            scope = None if args.scope is None else Scope(args.scope)
            window = None if args.window is None else Window(args.window)
            pools = await budget.list_scope_budgets_all(
                scope=scope, kind=ScopeBudgetKind.POOLED, window=window
            )
            for line in list_lines(pools):
                say(line)
            return
        scope, kind = Scope(args.scope), ScopeBudgetKind.POOLED
        if args.action == "show":
            for line in show_lines(await budget.get_scope_budget(scope, args.scope_id, kind)):
                say(line)
        elif args.action == "delete":
            await budget.delete_scope_budget(scope, args.scope_id, kind)
            say(f"deleted: {scope.value} {args.scope_id}")
        else:
            policy = Policy(
                max_tokens=args.max_tokens,
                max_cost=args.max_cost,
                max_tool_calls=args.max_tool_calls,
                max_retries=args.max_retries,
                threshold_percent=args.threshold,
            )
            stored = await budget.put_scope_budget(
                scope,
                args.scope_id,
                kind,
                policy=policy,
                window=Window(args.window),
                enforcement=Enforcement.ADVISORY if args.advisory else Enforcement.HARD,
                model_match=args.model_match,
                max_model_calls=args.max_model_calls,
            )
            for line in list_lines([stored]):
                say(line)
