"""Budget SQL of spend reports: sums of the ledger's consume rows per owner, model or time."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from budget_service.domain.spend import SpendGroupBy, SpendQuery, SpendRow

# RFC 3339 UTC of a bucket start: fixed width, so byte order is time order (one keyset for all).
_BUCKET_TEXT = """'YYYY-MM-DD"T"HH24:MI:SS"Z"'"""
_BUCKET = "to_char(date_trunc('{unit}', l.created_at AT TIME ZONE 'UTC'), " + _BUCKET_TEXT + ")"
_KEYS = {
    SpendGroupBy.PROJECT: "r.project_id",
    SpendGroupBy.WORKFLOW: "r.workflow_id",
    SpendGroupBy.AGENT: "r.agent_id",
    SpendGroupBy.MODEL: "coalesce(l.model, '')",
    SpendGroupBy.DAY: _BUCKET.format(unit="day"),
    SpendGroupBy.HOUR: _BUCKET.format(unit="hour"),
    SpendGroupBy.END_USER: "r.end_user_id",
    SpendGroupBy.API_KEY: "r.api_key_id",
    SpendGroupBy.TAG: "coalesce(r.tags ->> $12::text, '')",
}
_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# The ledger is append-only and a consume row holds exactly what Consume recorded (its
# consumed_* deltas), so these sums are exact; the run row gives the owners OpenRun named.
# Sums are numeric (no overflow in SQL); the caller refuses any past int64. $4..$7 are NULL
# for no filter; $8 is the last key of the previous page (NULL on the first), $9 the limit;
# $10, $11 filter by end-user and key (NULL: none), $12 (TAG only) the tag key.
_REPORT = """
SELECT g.* FROM (
    SELECT {key} AS key,
        sum(l.consumed_cost_nanos) AS cost_nanos, sum(l.consumed_tokens) AS tokens,
        sum(l.consumed_tool_calls) AS tool_calls, sum(l.consumed_retries) AS retries,
        count(*) AS consume_count
    FROM budget.ledger l
    JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
    WHERE l.tenant_id = $1 AND r.tenant_id = $1 AND l.decision = 'consume'
      AND l.created_at >= $2 AND l.created_at < $3
      AND ($4::text IS NULL OR r.project_id = $4)
      AND ($5::text IS NULL OR r.workflow_id = $5)
      AND ($6::text IS NULL OR r.agent_id = $6)
      AND ($7::text IS NULL OR l.model = $7)
      AND ($10::text IS NULL OR r.end_user_id = $10)
      AND ($11::text IS NULL OR r.api_key_id = $11)
    GROUP BY 1
) g
WHERE $8::text IS NULL OR g.key COLLATE "C" > $8
ORDER BY g.key COLLATE "C"
LIMIT $9"""

REPORTS = {group: _REPORT.format(key=key) for group, key in _KEYS.items()}


def _bucket_start(group: SpendGroupBy, key: str) -> datetime | None:
    return datetime.strptime(key, _DATETIME_FORMAT).replace(tzinfo=UTC) if group.is_time else None


async def report_spend(
    conn: asyncpg.Connection, tenant: str, query: SpendQuery, after_key: str | None, limit: int
) -> list[SpendRow]:
    """At most `limit` groups with a key after `after_key`, ascending by key (bytes order)."""
    f = query.filter
    found = await conn.fetch(
        REPORTS[query.group_by],
        tenant,
        query.start,
        query.end,
        f.project_id or None,
        f.workflow_id or None,
        f.agent_id or None,
        f.model or None,
        after_key,
        limit,
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
