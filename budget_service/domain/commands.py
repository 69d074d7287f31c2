"""Use-case inputs and outputs of the budget service, in domain types (no protobuf)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budget_service.domain.policy import (
    BudgetPolicy,
    Dimension,
    ModelVerdict,
    Scope,
    ScopeBudgetKind,
    Window,
)
from budget_service.domain.records import (
    DimensionStatus,
    ReservationRecord,
    RunRecord,
    StoredScopeBudget,
)
from budget_service.domain.run_state import ReservationState, ReserveMode, RunOutcome, RunState
from budget_service.store.reads import PoolView, StoredEvent


@dataclass(frozen=True)
class Mutation:
    """Every mutating call: its idempotency key and the request's deterministic bytes."""

    method: str
    request_id: str
    payload: bytes


@dataclass(frozen=True)
class OpenRun:
    run_id: str
    project_id: str
    workflow_id: str
    agent_id: str
    policy: BudgetPolicy
    end_user_id: str = ""  # optional: the platform's customer the run works for
    tags: tuple[tuple[str, str], ...] = ()  # sorted by key; for reports only
    api_key_id: str = ""  # the issued key the caller authenticated with, if any


@dataclass(frozen=True)
class Reserve:
    run_id: str
    model: str
    estimate: Mapping[Dimension, int]
    ttl_seconds: int  # 0: the host default
    mode: ReserveMode


@dataclass(frozen=True)
class Consume:
    run_id: str
    reservation_id: str  # empty: usage without a hold
    model: str
    usage: Mapping[Dimension, int]


@dataclass(frozen=True)
class Release:
    run_id: str
    reservation_id: str


@dataclass(frozen=True)
class CloseRun:
    run_id: str
    outcome: RunOutcome


@dataclass(frozen=True)
class ResumeRun:
    run_id: str
    delta: Mapping[Dimension, int]
    approver: str  # the authenticated principal who approved, never request text
    note: str = ""  # the request's free-text `approver`: an audit note only


@dataclass(frozen=True)
class Check:
    run_id: str
    estimate: Mapping[Dimension, int]
    model: str  # empty: no model verdict


@dataclass(frozen=True)
class ScopeKey:
    scope: Scope
    scope_id: str
    kind: ScopeBudgetKind


@dataclass(frozen=True)
class ScopeBudgetQuery:
    """ListScopeBudgets' filter: None matches every scope, kind or window."""

    scope: Scope | None
    kind: ScopeBudgetKind | None
    window: Window | None


@dataclass(frozen=True)
class ScopeBudgetSortKey:
    """Where a page of scope budgets ends: (scope, scope_id, kind) as stored."""

    scope: str
    scope_id: str
    kind: str


@dataclass(frozen=True)
class ScopeBudgetPage:
    budgets: list[StoredScopeBudget]
    next_after: ScopeBudgetSortKey | None  # None on the last page


@dataclass(frozen=True)
class RunView:
    run: RunRecord
    dimensions: list[DimensionStatus]
    advisory: bool


@dataclass(frozen=True)
class ReserveResult:
    reservation: ReservationRecord
    dimensions: list[DimensionStatus]
    advisory_refusal_reason: str

    @property
    def reply(self) -> Mapping[str, Any] | None:
        """The stored reply document this result reads its fields from (a value decoded by
        store/stored_replies.py), which the API turns straight into its response; None for a
        result built in Python."""
        return None


@dataclass(frozen=True)
class ConsumeResult:
    overrun: Mapping[Dimension, int]
    dimensions: list[DimensionStatus]
    state: RunState
    reservation_state: ReservationState | None

    @property
    def reply(self) -> Mapping[str, Any] | None:
        """As ReserveResult.reply: the stored reply document, or None."""
        return None


@dataclass(frozen=True)
class CloseResult:
    view: RunView
    released_holds: int


@dataclass(frozen=True)
class CheckResult:
    would_grant: bool
    refusal_reason: str
    advisory_refusal_reason: str
    state: RunState
    dimensions: list[DimensionStatus]
    verdict: ModelVerdict | None


@dataclass(frozen=True)
class ScopeBudgetView:
    stored: StoredScopeBudget
    pool: PoolView | None


@dataclass(frozen=True)
class EventsPage:
    run: RunRecord
    events: list[StoredEvent]
    next_after_seq: int | None  # None: no further page
