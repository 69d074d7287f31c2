"""Budget SQL of spend reports: sums per owner, model or time, read from the spend rollups.

The rollups (migrations 0013, 0016 and 0019, budget.roll_up_spend_v1) hold up to 8 bucket rows
per (project, workflow, agent, model, end-user, API key, tag set, UTC hour) of a tenant (so
concurrent Consumes of a busy group do not queue on one row), maintained in each Consume's own
transaction; every query here sums the buckets of a group (GROUP BY its key), so a report reads
O(groups) rows, not the window's consume rows (a tag set is one group: runs tagged with many
distinct sets make as many rows, never more than their consume rows). A window's whole hours
come from them; its partial first and last hours (when its ends are not on the hour) are summed
from those hours' consume rows of the ledger, so any window's sums equal the ledger's exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from budget_service.domain.spend import SpendGroupBy, SpendQuery, SpendRow

# RFC 3339 UTC of a bucket start: fixed width, so byte order is time order (one keyset for all).
_BUCKET_TEXT = """'YYYY-MM-DD"T"HH24:MI:SS"Z"'"""
_KEYS = {
    SpendGroupBy.PROJECT: "s.project_id",
    SpendGroupBy.WORKFLOW: "s.workflow_id",
    SpendGroupBy.AGENT: "s.agent_id",
    SpendGroupBy.MODEL: "s.model",
    SpendGroupBy.DAY: f"to_char(date_trunc('day', s.hour AT TIME ZONE 'UTC'), {_BUCKET_TEXT})",
    SpendGroupBy.HOUR: f"to_char(s.hour AT TIME ZONE 'UTC', {_BUCKET_TEXT})",
    SpendGroupBy.END_USER: "s.end_user_id",
    SpendGroupBy.API_KEY: "s.api_key_id",
    SpendGroupBy.TAG: "coalesce(s.tags ->> $16::text, '')",
}
_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_HOUR = timedelta(hours=1)

# Consume rows of the ledger in [$a, $b), shaped as rollup rows (one each).
_LEDGER_PART = """
    SELECT r.project_id, r.workflow_id, r.agent_id, coalesce(l.model, '') AS model,
        r.end_user_id, r.api_key_id, r.tags, date_trunc('hour', l.created_at, 'UTC') AS hour,
        l.consumed_cost_nanos::numeric AS cost_nanos, l.consumed_tokens::numeric AS tokens,
        l.consumed_tool_calls::numeric AS tool_calls, l.consumed_retries::numeric AS retries,
        1::bigint AS consume_count
    FROM budget.ledger l
    JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
    WHERE l.tenant_id = $1 AND r.tenant_id = $1 AND l.decision = 'consume'
      AND l.created_at >= {a} AND l.created_at < {b}"""

# $2/$3: the whole hours [from, to) read from the rollups; $10..$13 the partial hours read from
# the ledger ([$10, $11) and [$12, $13), either may be empty). $4..$7 are NULL for no filter;
# $8 is the last key of the previous page (NULL on the first), $9 the limit; $14, $15 filter by
# end-user and key (NULL: none), $16 (TAG only) is the tag key. Sums stay numeric (no overflow
# in SQL); the caller refuses any past int64.
_REPORT = f"""
WITH spend AS (
    SELECT s.project_id, s.workflow_id, s.agent_id, s.model, s.end_user_id, s.api_key_id,
        s.tags, s.hour, s.cost_nanos, s.tokens, s.tool_calls, s.retries, s.consume_count
    FROM budget.spend_rollups s
    WHERE s.tenant_id = $1 AND s.hour >= $2 AND s.hour < $3
    UNION ALL {_LEDGER_PART.format(a="$10", b="$11")}
    UNION ALL {_LEDGER_PART.format(a="$12", b="$13")}
)
SELECT g.* FROM (
    SELECT {{key}} AS key,
        sum(s.cost_nanos) AS cost_nanos, sum(s.tokens) AS tokens,
        sum(s.tool_calls) AS tool_calls, sum(s.retries) AS retries,
        sum(s.consume_count) AS consume_count
    FROM spend s
    WHERE ($4::text IS NULL OR s.project_id = $4)
      AND ($5::text IS NULL OR s.workflow_id = $5)
      AND ($6::text IS NULL OR s.agent_id = $6)
      AND ($7::text IS NULL OR s.model = $7)
      AND ($14::text IS NULL OR s.end_user_id = $14)
      AND ($15::text IS NULL OR s.api_key_id = $15)
    GROUP BY 1
) g
WHERE $8::text IS NULL OR g.key COLLATE "C" > $8
ORDER BY g.key COLLATE "C"
LIMIT $9"""

REPORTS = {group: _REPORT.format(key=key) for group, key in _KEYS.items()}


def _bucket_start(group: SpendGroupBy, key: str) -> datetime | None:
    return datetime.strptime(key, _DATETIME_FORMAT).replace(tzinfo=UTC) if group.is_time else None


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def split_window(
    start: datetime, end: datetime
) -> tuple[tuple[datetime, datetime], tuple[datetime, datetime], tuple[datetime, datetime]]:
    """[start, end) as its whole UTC hours and the partial hours before and after them (each
    a half-open range, possibly empty); together they cover it once."""
    first = _floor_hour(start)
    if first < start:
        first += _HOUR
    last = _floor_hour(end)
    if first >= last:  # no whole hour: the ledger covers it all
        return (first, first), (start, end), (end, end)
    return (first, last), (start, first), (last, end)


async def report_spend(
    conn: asyncpg.Connection, tenant: str, query: SpendQuery, after_key: str | None, limit: int
) -> list[SpendRow]:
    """At most `limit` groups with a key after `after_key`, ascending by key (bytes order)."""
    f = query.filter
    hours, head, tail = split_window(query.start, query.end)
    found = await conn.fetch(
        REPORTS[query.group_by],
        tenant,
        *hours,
        f.project_id or None,
        f.workflow_id or None,
        f.agent_id or None,
        f.model or None,
        after_key,
        limit,
        *head,
        *tail,
        f.end_user_id or None,
        f.api_key_id or None,
        *((query.tag_key,) if query.group_by is SpendGroupBy.TAG else ()),
    )
    return [
        SpendRow(
            key=r["key"],
            bucket_start=_bucket_start(query.group_by, r["key"]),
            cost_nanos=int(r["cost_nanos"]),
            tokens=int(r["tokens"]),
            tool_calls=int(r["tool_calls"]),
            retries=int(r["retries"]),
            consume_count=int(r["consume_count"]),
        )
        for r in found
    ]
