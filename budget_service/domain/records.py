"""Stored budget state as domain records: runs, holds, pools and the changes a call writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from budget_service.domain.policy import (
    HOST,
    AnyDimension,
    BudgetLimits,
    Dimension,
    EffectiveBudget,
    PoolDimension,
    Scope,
    ScopeBudget,
)
from budget_service.domain.run_state import (
    Amounts,
    Balance,
    BalanceRef,
    ReservationState,
    RunOutcome,
    RunStatus,
)

ZERO: Mapping[Dimension, int] = {d: 0 for d in Dimension}


def amounts(values: Mapping[Dimension, int] | None = None) -> dict[Dimension, int]:
    """All four dimensions, missing ones zero."""
    values = values or {}
    return {d: values.get(d, 0) for d in Dimension}


@dataclass(frozen=True)
class PoolKey:
    """One pool balance row: a pooled scope budget in one calendar window."""

    ref: BalanceRef
    window_start: datetime


@dataclass(frozen=True)
class PoolBalance:
    """A pool row's stored facts; `overdue` is held by other runs' holds past their expiry,
    which no longer counts but is still in `held` until those holds are marked expired. Model
    calls, a pool's own dimension, are kept beside the four."""

    key: PoolKey
    consumed: Mapping[Dimension, int] = field(default_factory=lambda: dict(ZERO))
    held: Mapping[Dimension, int] = field(default_factory=lambda: dict(ZERO))
    overdue: Mapping[Dimension, int] = field(default_factory=lambda: dict(ZERO))
    consumed_model_calls: int = 0
    held_model_calls: int = 0
    overdue_model_calls: int = 0

    def judged(self, limits: BudgetLimits | None) -> dict[Dimension, Balance]:
        """The balance a decision sees: live limits, held without overdue holds."""
        return {
            d: Balance(
                limits.limit(d) if limits else None,
                self.consumed[d],
                self.held[d] - self.overdue[d],
            )
            for d in Dimension
        }

    def reported(
        self, limits: BudgetLimits | None, max_model_calls: int | None = None
    ) -> dict[AnyDimension, Balance]:
        """judged(), and the pool's model calls when it bounds them: what its statuses report."""
        found: dict[AnyDimension, Balance] = {d: b for d, b in self.judged(limits).items()}
        if max_model_calls is not None:
            held = self.held_model_calls - self.overdue_model_calls
            found[PoolDimension.MODEL_CALLS] = Balance(
                max_model_calls, self.consumed_model_calls, held
            )
        return found


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    project_id: str
    workflow_id: str
    agent_id: str
    budget: EffectiveBudget
    status: RunStatus
    consumed: Mapping[Dimension, int]
    held: Mapping[Dimension, int]
    pools: tuple[BalanceRef, ...]
    scope_advisory: bool
    policy_version: int
    next_seq: int
    open_fingerprint: bytes
    created_at: datetime
    updated_at: datetime
    outcome: RunOutcome | None = None
    advisory_refusals: int = 0
    end_user_id: str = ""
    api_key_id: str = ""
    tags: tuple[tuple[str, str], ...] = ()

    def balances(self, overdue: Amounts | None = None) -> dict[Dimension, Balance]:
        """The run's own balance; `overdue` (its holds past expiry) no longer counts."""
        overdue = overdue or ZERO
        return {
            d: Balance(self.budget.limit(d), self.consumed[d], self.held[d] - overdue.get(d, 0))
            for d in Dimension
        }

    def scope_id(self, scope: Scope) -> str:
        return {
            Scope.RUN: "",
            Scope.WORKFLOW: self.workflow_id,
            Scope.AGENT: self.agent_id,
            Scope.PROJECT: self.project_id,
            Scope.END_USER: self.end_user_id,
            Scope.API_KEY: self.api_key_id,
        }[scope]

    @property
    def owners(self) -> tuple[BalanceRef, ...]:
        """The scopes the run belongs to (all but project are optional)."""
        refs = [BalanceRef(s, self.scope_id(s)) for s in (Scope.WORKFLOW, Scope.AGENT)]
        extra = [BalanceRef(s, self.scope_id(s)) for s in (Scope.END_USER, Scope.API_KEY)]
        return (
            *(r for r in refs if r.scope_id),
            BalanceRef(Scope.PROJECT, self.project_id),
            *(r for r in extra if r.scope_id),
        )


@dataclass(frozen=True)
class ReservationRecord:
    reservation_id: str
    run_id: str
    model: str
    requested: Mapping[Dimension, int]
    granted: Mapping[Dimension, int]
    state: ReservationState
    pools: tuple[PoolKey, ...]
    created_at: datetime
    expires_at: datetime
    model_calls: int = 0  # held on each of its pools: 1 when Reserve named a model

    @property
    def reply(self) -> Mapping[str, Any] | None:
        """The hold of a stored reply document this record reads its fields from (a value
        decoded by store/stored_replies.py), which the API turns straight into its message;
        None for a record read from its table or built in Python."""
        return None


@dataclass(frozen=True)
class StoredScopeBudget:
    """A scope budget with its version; `budget` is the policy-module value."""

    budget: ScopeBudget
    version: int
    updated_at: datetime


@dataclass(frozen=True)
class DimensionStatus:
    """One dimension of one balance as reported to callers (modelCalls: pools only)."""

    dimension: AnyDimension
    limit: int | None
    consumed: int
    held: int
    remaining: int | None
    binding_scope: Scope
    binding_scope_id: str
    clamped_by: str = ""
    window_end: datetime | None = None  # a windowed pool's: when its current window ends


def run_statuses(run: RunRecord, balances: Mapping[Dimension, Balance]) -> list[DimensionStatus]:
    """The run's four dimensions with the scope whose limit binds each (HOST: a ceiling)."""
    found = []
    for d in Dimension:
        b = balances[d]
        source = run.budget.binding.get(d, Scope.RUN.value)
        scope = Scope.RUN if source == HOST else Scope(source)
        clamped = HOST if source == HOST else ""
        found.append(
            DimensionStatus(
                d, b.limit, b.consumed, b.held, b.remaining, scope, run.scope_id(scope), clamped
            )
        )
    return found


def pool_statuses(
    ref: BalanceRef, balances: Mapping[AnyDimension, Balance], window_end: datetime | None = None
) -> list[DimensionStatus]:
    """A pool's bounded dimensions (`window_end`: when its current window ends, if windowed)."""
    return [
        DimensionStatus(
            d, b.limit, b.consumed, b.held, b.remaining, ref.scope, ref.scope_id, "", window_end
        )
        for d, b in balances.items()
        if b.limit is not None
    ]
