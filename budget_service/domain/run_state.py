"""Budget state as plain data: run lifecycle, holds, balances, breaches and contention."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from budget_service.domain.policy import AnyDimension, Dimension, Scope

Amounts = Mapping[Dimension, int]


class RunState(enum.StrEnum):
    ACTIVE = "active"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CLOSED = "closed"


class RunOutcome(enum.StrEnum):
    """The caller's view of how a run ended, recorded by CloseRun."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReserveMode(enum.StrEnum):
    ALL_OR_NOTHING = "all_or_nothing"
    UP_TO = "up_to"


class ReservationState(enum.StrEnum):
    """Each hold ends exactly once: consumed, released, or expired."""

    OPEN = "open"
    CONSUMED = "consumed"
    RELEASED = "released"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Balance:
    """One dimension of one balance (the run or a pool): limit (None = unbounded) and facts."""

    limit: int | None
    consumed: int = 0
    held: int = 0

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.consumed - self.held)


@dataclass(frozen=True)
class BalanceRef:
    """Which balance: the run itself (`RUN_BALANCE`) or a pool `(scope, scope_id)`."""

    scope: Scope
    scope_id: str = ""

    @property
    def sort_key(self) -> tuple[int, str]:
        # The canonical order: the run first, then pools narrowest scope first, then by id. The
        # store locks rows in this same order, so concurrent Reserves cannot deadlock.
        return (self.scope.rank, self.scope_id)


RUN_BALANCE = BalanceRef(Scope.RUN)


@dataclass(frozen=True)
class Breach:
    """An attempt that cannot fit even if every hold were released."""

    dimension: AnyDimension  # a run's own breach is always one of the four
    limit: int
    consumed: int
    observed: int  # what the attempt would reach (reserve) or reached (consume)
    balance: BalanceRef = RUN_BALANCE


@dataclass(frozen=True)
class Contention:
    """It would fit once open holds end: retryable, and the run is untouched."""

    dimension: AnyDimension
    limit: int
    consumed: int
    held: int
    requested: int
    balance: BalanceRef = RUN_BALANCE


@dataclass(frozen=True)
class RunStatus:
    """The run's lifecycle state and its once-per-dimension event flags, stored with the run."""

    state: RunState = RunState.ACTIVE
    crossed: frozenset[Dimension] = frozenset()
    exhausted: frozenset[Dimension] = frozenset()
    breached: frozenset[Dimension] = frozenset()  # limits advisory cap.breached to once
    stopped_by: Breach | None = None  # the breach that made the run FAILED or INTERRUPTED

    @property
    def failure_code(self) -> str:
        """The RFC's error code of a failed run, empty otherwise."""
        return "budget_exhausted" if self.state is RunState.FAILED else ""
