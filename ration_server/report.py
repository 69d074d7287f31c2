"""`ration report`: a spend report (ReportSpend) of a running budget service, as a table."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from ration_client import BudgetClient, SpendGroupBy, SpendRow

COLUMNS = ("cost (USD)", "tokens", "tool calls", "retries", "calls")
DEFAULT_DAYS = 7
# The empty key (no model, workflow or agent) as the client has it: the empty string, shown
# as Python and JSON write it.
EMPTY_KEY = '""'


def instant(text: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 date-time (UTC when it names no offset)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date (2025-05-01) or date-time (2025-05-01T13:00Z)"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        help="budget service address (default: RATION_BUDGET_ADDRESS, else 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--from",
        dest="start",
        type=instant,
        help=f"window start, inclusive (default: {DEFAULT_DAYS} days before --to)",
    )
    parser.add_argument("--to", dest="end", type=instant, help="window end, exclusive (now)")
    parser.add_argument(
        "--group-by",
        choices=[g.value for g in SpendGroupBy],
        default=SpendGroupBy.PROJECT.value,
        help="what each row sums (default: project)",
    )
    parser.add_argument("--project", default="", help="only this project_id")
    parser.add_argument("--workflow", default="", help="only this workflow_id")
    parser.add_argument("--agent", default="", help="only this agent_id")
    parser.add_argument("--model", default="", help="only this model")
    parser.add_argument("--end-user", default="", help="only this end_user_id")
    parser.add_argument("--api-key", default="", help="only runs of this issued key_id")
    parser.add_argument("--tag", default="", help="with --group-by tag: the tag key")


def table(group_by: SpendGroupBy, rows: Sequence[SpendRow]) -> list[str]:
    """Aligned lines: one per group, then the total. Cost is exact (nanos as 9 decimals)."""
    cells = [
        [row.key or EMPTY_KEY, _usd(row.cost_nanos), *(f"{n:,}" for n in _counts(row))]
        for row in rows
    ]
    total_cost = sum(row.cost_nanos for row in rows)
    totals = [sum(_counts(row)[i] for row in rows) for i in range(len(COLUMNS) - 1)]
    cells.append(["total", _usd(total_cost), *(f"{n:,}" for n in totals)])
    header = [group_by.value, *COLUMNS]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        first = values[0].ljust(widths[0])
        rest = (v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return [line(header), *(line(c) for c in cells)]


def _counts(row: SpendRow) -> tuple[int, int, int, int]:
    return (row.tokens, row.tool_calls, row.retries, row.consume_count)


def _usd(nanos: int) -> str:
    whole, fraction = divmod(nanos, 10**9)
    return f"{whole}.{fraction:09d}"


async def run_report(
    args: argparse.Namespace, *, token: str | None, say: Callable[[str], None] = print
) -> None:
    end = args.end or datetime.now(UTC)
    start = args.start or end - timedelta(days=DEFAULT_DAYS)
    group_by = SpendGroupBy(args.group_by)
    async with BudgetClient(args.budget, token=token) as budget:
        rows = await budget.report_spend_all(
            start,
            end,
            group_by,
            project_id=args.project,
            workflow_id=args.workflow,
            agent_id=args.agent,
            model=args.model,
            page_size=1000,
            end_user_id=args.end_user,
            api_key_id=args.api_key,
            tag_key=args.tag,
        )
    say(f"spend from {start.isoformat()} to {end.isoformat()} by {group_by.value}")
    for text in table(group_by, rows):
        say(text)
