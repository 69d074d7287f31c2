"""Spend reports: the query (window, grouping, filter), its input rules and the rows it sums."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from budget_service.domain import input_rules as v
from budget_service.domain.policy import MAX_TOTAL
from servicekit.errors import FieldViolation

# A report sums the ledger rows of one window; a year (a leap year's days) bounds its cost.
MAX_WINDOW = timedelta(days=366)
# The key of a DAY or HOUR group: its bucket start in RFC 3339 UTC, fixed width, so byte order
# is time order.
BUCKET_KEY_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class SpendGroupBy(enum.StrEnum):
    """What a report row groups by: an owner of the run, the model, or a UTC time bucket."""

    PROJECT = "project"
    WORKFLOW = "workflow"
    AGENT = "agent"
    MODEL = "model"
    DAY = "day"
    HOUR = "hour"
    END_USER = "end_user"
    API_KEY = "api_key"
    TAG = "tag"  # the value of one tag key (SpendQuery.tag_key)

    @property
    def is_time(self) -> bool:
        return self in (SpendGroupBy.DAY, SpendGroupBy.HOUR)


@dataclass(frozen=True)
class SpendFilter:
    """Exact matches; an empty field matches anything."""

    project_id: str = ""
    workflow_id: str = ""
    agent_id: str = ""
    model: str = ""
    end_user_id: str = ""
    api_key_id: str = ""


@dataclass(frozen=True)
class SpendQuery:
    start: datetime  # inclusive
    end: datetime  # exclusive
    group_by: SpendGroupBy
    filter: SpendFilter
    tag_key: str = ""  # with TAG only


@dataclass(frozen=True)
class SpendRow:
    """The sums of one group's consume rows in the window (native units: cost in nanos).
    For a time grouping, key is the bucket start in RFC 3339 UTC and bucket_start the same."""

    key: str
    bucket_start: datetime | None
    cost_nanos: int
    tokens: int
    tool_calls: int
    retries: int
    consume_count: int

    @property
    def totals(self) -> tuple[int, ...]:
        return (self.cost_nanos, self.tokens, self.tool_calls, self.retries, self.consume_count)


@dataclass(frozen=True)
class SpendPage:
    rows: list[SpendRow]
    next_after_key: str | None  # the last key of this page when more groups follow


def bucket_start(key: str) -> datetime:
    """The bucket start a DAY or HOUR key names (ValueError when it names none)."""
    return datetime.strptime(key, BUCKET_KEY_FORMAT).replace(tzinfo=UTC)


def validate_window(start: datetime, end: datetime) -> list[FieldViolation]:
    if end <= start:
        return [FieldViolation("end_time", "must be after start_time")]
    if end - start > MAX_WINDOW:
        return [FieldViolation("end_time", f"must be at most {MAX_WINDOW.days} days after start")]
    return []


def validate_filter(found: SpendFilter, prefix: str = "filter") -> list[FieldViolation]:
    return (
        v.validate_optional_id(found.project_id, f"{prefix}.project_id")
        + v.validate_optional_id(found.workflow_id, f"{prefix}.workflow_id")
        + v.validate_optional_id(found.agent_id, f"{prefix}.agent_id")
        + (v.validate_model_id(found.model, f"{prefix}.model") if found.model else [])
        + v.validate_optional_id(found.end_user_id, f"{prefix}.end_user_id")
        + v.validate_optional_id(found.api_key_id, f"{prefix}.api_key_id")
    )


def validate_tag_key(group_by: SpendGroupBy, tag_key: str) -> list[FieldViolation]:
    """group_by_tag_key: required with TAG (a valid tag key), empty otherwise."""
    path = "group_by_tag_key"
    if group_by is not SpendGroupBy.TAG:
        return [FieldViolation(path, "only with SPEND_GROUP_BY_TAG")] if tag_key else []
    if not tag_key:
        return [FieldViolation(path, "is required with SPEND_GROUP_BY_TAG")]
    return [FieldViolation(path, f.description) for f in v.validate_tags({tag_key: ""})]


def sums_overflow(rows: list[SpendRow]) -> list[FieldViolation]:
    """Each run's totals stay within int64, but a sum over many runs might not: such a report
    is refused (narrow the window) rather than wrapped or rounded."""
    if any(total > MAX_TOTAL for row in rows for total in row.totals):
        return [FieldViolation("end_time", "the sums exceed 2^63 - 1: narrow the window")]
    return []
