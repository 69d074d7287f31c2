"""The tenant event stream's rules: positions in a tenant's event order, cursors, the filter."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from budget_service.domain import events as ev
from budget_service.domain import input_rules as v
from servicekit.errors import FieldViolation

EVENT_TYPES = (
    ev.BudgetReserved.event_type,
    ev.BudgetConsumed.event_type,
    ev.ThresholdCrossed.event_type,
    ev.BudgetExhausted.event_type,
    ev.CapBreached.event_type,
    ev.RunFailed.event_type,
)
MAX_CURSOR_CHARS = 512
MAX_FILTER_TYPES = 16
MAX_FILTER_IDS = 100
MAX_TX = 2**64 - 1  # xid8 is an unsigned 64-bit epoch + xid
_CURSOR_VERSION = "1"


@dataclass(frozen=True, order=True)
class Position:
    """A place in a tenant's event order, (tx, run_id, seq): a reader at a position has read
    every event at or before it. tx is the id of the transaction that wrote an event, run_id
    compares by bytes (SQL collation "C"), and (tx, "", 0) lies before every event of tx."""

    tx: int
    run_id: str
    seq: int

    def cursor(self) -> str:
        """The opaque token a client resumes from."""
        text = f"{_CURSOR_VERSION}.{self.tx}.{self.seq}.{self.run_id}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def before(cls, tx: int) -> Position:
        """Before every event of transaction `tx` (and after every event of an older one)."""
        return cls(tx, "", 0)


START = Position(0, "", 0)


def parse_cursor(token: str, path: str = "after_cursor") -> Position | FieldViolation:
    """The position a cursor names, or why it is not one (empty is START)."""
    if not token:
        return START
    bad = FieldViolation(path, "is not a cursor of WatchTenantEvents")
    if len(token) > MAX_CURSOR_CHARS:
        return bad
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        version, tx_text, seq_text, run_id = text.split(".", 3)
        tx, seq = int(tx_text), int(seq_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return bad
    if version != _CURSOR_VERSION or not 0 <= tx <= MAX_TX or not 0 <= seq < 2**63:
        return bad
    if run_id and v.validate_run_id(run_id) and not _is_pool_key(run_id):
        return bad
    if not tx_text.isdigit() or not seq_text.isdigit():  # int() also takes "+1", " 1", "1_0"
        return bad
    return Position(tx, run_id, seq)


# A pool window's key in the order (store/tenant_events.py): "~scope/scope_id/window_us".
_POOL_KEY = re.compile(r"^~(workflow|agent|project)/[^\x00-\x1f]{1,128}/-?[0-9]{1,20}$")


def _is_pool_key(key: str) -> bool:
    return _POOL_KEY.match(key) is not None


@dataclass(frozen=True)
class TenantEventFilter:
    """An event is sent when it matches every non-empty tuple (any entry within one)."""

    event_types: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()
    project_ids: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.event_types or self.run_ids or self.project_ids)


def _bounded(values: tuple[str, ...], path: str, most: int) -> list[FieldViolation]:
    if len(values) > most:
        return [FieldViolation(path, f"must have at most {most} entries")]
    return []


def validate_filter(found: TenantEventFilter, prefix: str = "filter") -> list[FieldViolation]:
    """Bounded lists of known types and well-formed ids."""
    problems = _bounded(found.event_types, f"{prefix}.event_types", MAX_FILTER_TYPES)
    for i, name in enumerate(found.event_types):
        if name not in EVENT_TYPES:
            problems.append(FieldViolation(f"{prefix}.event_types[{i}]", "is not an event type"))
    problems += _bounded(found.run_ids, f"{prefix}.run_ids", MAX_FILTER_IDS)
    for i, run_id in enumerate(found.run_ids[:MAX_FILTER_IDS]):
        problems += v.validate_run_id(run_id, f"{prefix}.run_ids[{i}]")
    problems += _bounded(found.project_ids, f"{prefix}.project_ids", MAX_FILTER_IDS)
    for i, project_id in enumerate(found.project_ids[:MAX_FILTER_IDS]):
        problems += v.validate_id(project_id, f"{prefix}.project_ids[{i}]")
    return problems


@dataclass(frozen=True)
class PollBackoff:
    """How long a follower waits before reading again: at once after a read that found
    events, then doubling from `shortest` up to `longest` while reads find nothing."""

    shortest: float
    longest: float

    def next(self, previous: float | None, found: bool) -> float:
        if found:
            return 0.0
        if not previous:
            return self.shortest
        return min(previous * 2, self.longest)
