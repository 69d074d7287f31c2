"""Budget SQL of spend reports: one page of sums per owner, model or time, read in O(page).

The rollups (migrations 0013, 0016 and 0019, budget.roll_up_spend_v1) hold up to 8 bucket rows
per (project, workflow, agent, model, end-user, API key, tag set, UTC hour) of a tenant, kept
in each Consume's own transaction. A window's whole hours are read from them; its partial first
and last hours (when its ends are not on the hour) from those hours' consume rows of the
ledger, so any window's sums equal the ledger's exactly.

A page never aggregates the window. It walks the keys in byte order from the page token's key,
one index probe per key (a recursive CTE: the next key is the first index entry after the
last), and sums each key's rows in the window through an index (a LATERAL subquery per key):
time buckets walk the primary key (tenant_id, hour, …), owners and models their own index
(tenant_id, <column> COLLATE "C", hour) of migration 0021. So a page reads the rows of its own
groups in the window, plus one probe per key with no rows there (it has rows in other hours)
and one for the next page's first key (whether more follow). A time page filtered by an owner
or model walks that filter's index (the finest given: end-user, key, agent, workflow,
project, model), so it skips the hours without it; an owner or model page filtered by another
column reads its keys' rows in the window and keeps the matching ones. An owner or model page
also reads the consume rows of the window's partial hours (at most two hours; none when its
ends are on the hour), to find their keys; a time page reads them only for their own buckets.

Grouping by TAG (`tags ->> key`, a key each request names) has no index to walk: it sums the
window's rollup rows per value, O(the window's rollup rows) per page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from budget_service.domain.spend import (
    SpendFilter,
    SpendGroupBy,
    SpendPage,
    SpendQuery,
    SpendRow,
    bucket_start,
)

# RFC 3339 UTC of a bucket start: fixed width, so byte order is time order (one keyset for all).
_BUCKET_TEXT = """'YYYY-MM-DD"T"HH24:MI:SS"Z"'"""
_HOUR = timedelta(hours=1)

# Parameters of every statement: $1 the tenant; $2/$3 the whole hours [from, to) read from the
# rollups; $4/$5 and $6/$7 the partial hours read from the ledger (either may be empty);
# $8..$13 the filters (NULL: none) on project, workflow, agent, model, end-user and key; $14
# the last key of the previous page (NULL on the first: text, a bucket start for DAY and
# HOUR); $15 the page size. $16 (TAG only) the tag key. Sums stay numeric (no overflow in SQL);
# the caller refuses any past int64.
_FILTERS = ("project_id", "workflow_id", "agent_id", "model", "end_user_id", "api_key_id")
_PARAM = {column: f"${n}::text" for n, column in enumerate(_FILTERS, start=8)}
# The column a time page filtered by it walks instead of the primary key: the finest first.
_LEADS = ("end_user_id", "api_key_id", "agent_id", "workflow_id", "project_id", "model")
# The rollup column of each owner or model grouping.
COLUMNS = {
    SpendGroupBy.PROJECT: "project_id",
    SpendGroupBy.WORKFLOW: "workflow_id",
    SpendGroupBy.AGENT: "agent_id",
    SpendGroupBy.MODEL: "model",
    SpendGroupBy.END_USER: "end_user_id",
    SpendGroupBy.API_KEY: "api_key_id",
}
_UNITS = {SpendGroupBy.HOUR: ("hour", "1 hour"), SpendGroupBy.DAY: ("day", "24 hours")}
_SUMS = "s.cost_nanos, s.tokens, s.tool_calls, s.retries, s.consume_count"
_ARRAY = (
    "ARRAY[sum(x.cost_nanos), sum(x.tokens), sum(x.tool_calls), sum(x.retries),"
    " sum(x.consume_count)]"
)


def _filters(keys: Mapping[str, str]) -> str:
    """Rows of the filters' values, each filter's column read as `keys` says."""
    return "".join(
        f" AND ({_PARAM[name]} IS NULL OR {keys[name]} = {_PARAM[name]})" for name in _FILTERS
    )


# A rollup row's owners and model are its columns.
_ROLLUP_KEYS = {name: f"s.{name}" for name in _FILTERS}


# A ledger row's model is the ledger's ('' for none), its owners the run's.
_LEDGER_KEYS = {
    "project_id": "r.project_id",
    "workflow_id": "r.workflow_id",
    "agent_id": "r.agent_id",
    "model": "coalesce(l.model, '')",
    "end_user_id": "r.end_user_id",
    "api_key_id": "r.api_key_id",
}


# Consume rows of the ledger in [{a}, {b}) that pass the filters, shaped as rollup rows (one
# each; {key} their key and a comma, or nothing): through ledger_consumes_by_time (0007), each
# row's run probed by its key (OFFSET 0 keeps the probe per row).
_LEDGER_ROWS = """
    SELECT {key}l.consumed_cost_nanos::numeric AS cost_nanos,
        l.consumed_tokens::numeric AS tokens, l.consumed_tool_calls::numeric AS tool_calls,
        l.consumed_retries::numeric AS retries, 1::bigint AS consume_count
    FROM budget.ledger l
    CROSS JOIN LATERAL (
        SELECT r.project_id, r.workflow_id, r.agent_id, r.end_user_id, r.api_key_id, r.tags
        FROM budget.runs r WHERE r.tenant_id = $1 AND r.run_id = l.run_id OFFSET 0) r
    WHERE l.tenant_id = $1 AND l.decision = 'consume'
      AND l.created_at >= {a} AND l.created_at < {b}""" + _filters(_LEDGER_KEYS)


def _sums_or_more(rows: str, exists: Sequence[str]) -> str:
    """The walk's sums of one key: before the page is full, its sums (NULL: no rows in the
    window); after, only whether it has a row ('{}'), to tell the caller more pages follow."""
    found = " OR ".join(f"EXISTS ({e})" for e in exists)
    return f"""CASE WHEN w.found < $15
            THEN (SELECT {_ARRAY} FROM ({rows}) x HAVING count(*) > 0)
            ELSE (SELECT '{{}}'::numeric[] WHERE {found}) END"""


def _owner_report(column: str) -> str:
    """Owners and models: the keys walked through (tenant_id, column COLLATE "C", hour), the
    partial hours' keys merged in from `partial` (summed once per page)."""
    own = f'{_PARAM[column]} COLLATE "C"'
    key = f's.{column} COLLATE "C"'
    ledger = f"{_LEDGER_KEYS[column]} AS key, "
    # The hours as row comparisons on (column, hour), which only the column's own index reads
    # as a range: the primary key cannot serve them by hour, so no plan sums the window there.
    rows = f"""SELECT {_SUMS} FROM budget.spend_rollups s
                WHERE s.tenant_id = $1 AND {key} = n.key
                  AND ({key}, s.hour) >= (n.key, $2::timestamptz)
                  AND ({key}, s.hour) < (n.key, $3::timestamptz){_filters(_ROLLUP_KEYS)}"""
    in_partial = "SELECT p.cost_nanos, p.tokens, p.tool_calls, p.retries, p.consume_count"
    in_partial += " FROM partial p WHERE p.key = n.key"
    return f"""
WITH RECURSIVE partial AS MATERIALIZED (
    SELECT x.key COLLATE "C" AS key, sum(x.cost_nanos) AS cost_nanos, sum(x.tokens) AS tokens,
        sum(x.tool_calls) AS tool_calls, sum(x.retries) AS retries,
        sum(x.consume_count) AS consume_count
    FROM ({_LEDGER_ROWS.format(key=ledger, a="$4", b="$5")}
          UNION ALL {_LEDGER_ROWS.format(key=ledger, a="$6", b="$7")}) x
    GROUP BY 1
),
-- lo: the least key the next step may find: after the last key (no text holds a NUL, so none
-- lies between k and k || chr(1)), and not before this column's filter, if any.
walk (key, sums, found, lo) AS (
    SELECT NULL::text COLLATE "C", NULL::numeric[], 0,
        greatest(coalesce($14::text || chr(1), ''), {own})
    UNION ALL
    SELECT n.key, g.sums, w.found + (g.sums IS NOT NULL)::integer, (n.key || chr(1)) COLLATE "C"
    FROM walk w
    -- The next key (OFFSET 0: found once, a plain value in the sums' conditions).
    CROSS JOIN LATERAL (
        SELECT least(
            (SELECT {key} FROM budget.spend_rollups s
             WHERE s.tenant_id = $1 AND {key} >= w.lo ORDER BY {key} LIMIT 1),
            (SELECT min(p.key) FROM partial p WHERE p.key >= w.lo)) AS key
        OFFSET 0) n
    CROSS JOIN LATERAL (
        SELECT {_sums_or_more(f"{rows} UNION ALL {in_partial}", (rows, in_partial))}
            AS sums OFFSET 0) g
    WHERE w.found <= $15 AND n.key IS NOT NULL AND ({own} IS NULL OR n.key = {own})
)
SELECT w.key, w.sums FROM walk w WHERE w.sums IS NOT NULL ORDER BY w.key"""


def _time_report(group: SpendGroupBy, lead: str | None) -> str:
    """DAY and HOUR: the buckets walked through the primary key (tenant_id, hour, …), or
    through (tenant_id, lead, hour) when filtered by `lead`; the partial hours' buckets are
    candidates of their own, their ledger rows read only by the page of their bucket."""
    unit, step = _UNITS[group]

    def hours(start: str, end: str) -> str:
        """Rollup rows of [start, end): by hour on the primary key, or, filtered by `lead`, as
        row comparisons on (lead, hour), which only lead's own index reads as a range."""
        if lead is None:
            return f"s.hour >= {start} AND s.hour < {end}"
        value, column = f'{_PARAM[lead]} COLLATE "C"', f's.{lead} COLLATE "C"'
        return (
            f"{column} = {value} AND ({column}, s.hour) >= ({value}, {start})"
            f" AND ({column}, s.hour) < ({value}, {end})"
        )

    rows = f"""SELECT {_SUMS} FROM budget.spend_rollups s
                WHERE s.tenant_id = $1
                  AND {hours("greatest($2, n.bucket)", "least($3, n.bucket_end)")}
                  {_filters(_ROLLUP_KEYS)}"""
    head = _LEDGER_ROWS.format(key="", a="greatest($4, n.bucket)", b="least($5, n.bucket_end)")
    tail = _LEDGER_ROWS.format(key="", a="greatest($6, n.bucket)", b="least($7, n.bucket_end)")
    return f"""
-- lo: where the next bucket may start (the end of the last one; on the first page any).
WITH RECURSIVE walk (bucket, sums, found, lo) AS (
    SELECT NULL::timestamptz, NULL::numeric[], 0,
        coalesce(date_trunc('{unit}', $14::timestamptz, 'UTC') + interval '{step}', '-infinity')
    UNION ALL
    SELECT n.bucket, g.sums, w.found + (g.sums IS NOT NULL)::integer, n.bucket_end
    FROM walk w
    -- The next bucket: the first from w.lo that has rollup rows in the whole hours or is a
    -- partial hour's. OFFSET 0 finds it once, and its end here: under row-level security a
    -- scan's bound is an index condition only when it applies nothing but comparisons to an
    -- outer value (`+ interval` is not leakproof).
    CROSS JOIN LATERAL (
        SELECT m.bucket, m.bucket + interval '{step}' AS bucket_end FROM (
            SELECT least(
                (SELECT date_trunc('{unit}', s.hour, 'UTC') FROM budget.spend_rollups s
                 WHERE s.tenant_id = $1 AND {hours("greatest($2, w.lo)", "$3")}
                 ORDER BY s.hour LIMIT 1),
                (SELECT min(e.bucket) FROM (VALUES
                    (date_trunc('{unit}', $4::timestamptz, 'UTC'), $4 < $5::timestamptz),
                    (date_trunc('{unit}', $6::timestamptz, 'UTC'), $6 < $7::timestamptz)
                 ) e (bucket, partial) WHERE e.partial AND e.bucket >= w.lo)) AS bucket
            OFFSET 0) m
        OFFSET 0) n
    CROSS JOIN LATERAL (
        SELECT {_sums_or_more(f"{rows} UNION ALL {head} UNION ALL {tail}", (rows, head, tail))}
            AS sums OFFSET 0) g
    WHERE w.found <= $15 AND n.bucket IS NOT NULL
)
SELECT to_char(w.bucket AT TIME ZONE 'UTC', {_BUCKET_TEXT}) AS key, w.sums
FROM walk w WHERE w.sums IS NOT NULL ORDER BY w.bucket"""


# TAG: the window's rows summed per tag value (no index to walk), then the keyset.
_TAG_KEY = "coalesce(r.tags ->> $16::text, '') AS key, "
_TAG_REPORT = f"""
WITH spend AS (
    SELECT coalesce(s.tags ->> $16::text, '') AS key, {_SUMS}
    FROM budget.spend_rollups s
    WHERE s.tenant_id = $1 AND s.hour >= $2 AND s.hour < $3{_filters(_ROLLUP_KEYS)}
    UNION ALL {_LEDGER_ROWS.format(key=_TAG_KEY, a="$4", b="$5")}
    UNION ALL {_LEDGER_ROWS.format(key=_TAG_KEY, a="$6", b="$7")}
)
SELECT g.key, g.sums FROM (
    SELECT x.key COLLATE "C" AS key, {_ARRAY} AS sums FROM spend x GROUP BY 1
) g
WHERE $14::text IS NULL OR g.key > $14::text
ORDER BY g.key
LIMIT $15 + 1"""


def report_sql(group: SpendGroupBy, spend_filter: SpendFilter) -> str:
    """The statement of one page of `group`, for the filters given."""
    if group in COLUMNS:
        return OWNER_REPORTS[group]
    if group in _UNITS:
        given = [column for column in _LEADS if getattr(spend_filter, column)]
        return TIME_REPORTS[group, given[0] if given else None]
    return _TAG_REPORT


OWNER_REPORTS = {group: _owner_report(column) for group, column in COLUMNS.items()}
TIME_REPORTS = {
    (group, lead): _time_report(group, lead) for group in _UNITS for lead in (None, *_LEADS)
}


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def split_window(
    start: datetime, end: datetime
) -> tuple[tuple[datetime, datetime], tuple[datetime, datetime], tuple[datetime, datetime]]:
    """[start, end) as its whole UTC hours and the partial hours before and after them (each
    a half-open range, possibly empty, and each within one UTC hour); together they cover it
    once."""
    first = _floor_hour(start)
    if first < start:
        first += _HOUR
    last = _floor_hour(end)
    if first > last:  # within one hour: the ledger covers it all
        return (first, first), (start, end), (end, end)
    return (first, last), (start, first), (last, end)


def report_args(
    tenant: str, query: SpendQuery, after_key: str | None, page_size: int
) -> list[object]:
    """The parameters of report_sql's statement, in its order."""
    f = query.filter
    hours, head, tail = split_window(query.start, query.end)
    after: object = after_key
    if query.group_by.is_time and after_key is not None:
        after = bucket_start(after_key)
    return [
        tenant,
        *hours,
        *head,
        *tail,
        *(getattr(f, column) or None for column in _FILTERS),
        after,
        page_size,
        *((query.tag_key,) if query.group_by is SpendGroupBy.TAG else ()),
    ]


async def report_spend(
    conn: asyncpg.Connection, tenant: str, query: SpendQuery, after_key: str | None, page_size: int
) -> SpendPage:
    """At most `page_size` groups with a key after `after_key`, ascending by key (byte order),
    and the last of them as the next page's start when more follow."""
    found = await conn.fetch(
        report_sql(query.group_by, query.filter), *report_args(tenant, query, after_key, page_size)
    )
    rows = [
        SpendRow(
            key=r["key"],
            bucket_start=bucket_start(r["key"]) if query.group_by.is_time else None,
            cost_nanos=int(r["sums"][0]),
            tokens=int(r["sums"][1]),
            tool_calls=int(r["sums"][2]),
            retries=int(r["sums"][3]),
            consume_count=int(r["sums"][4]),
        )
        for r in found[:page_size]
    ]
    return SpendPage(rows, rows[-1].key if len(found) > page_size else None)
