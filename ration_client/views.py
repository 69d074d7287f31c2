"""What the budget client returns: enums and frozen dataclasses, never protobuf messages.

Money is exact: cost appears as `Decimal` USD (`cost`, and the limits, balances and amounts of
the cost dimension), and as integer nanos where the name says so (`cost_nanos`). A limit that
does not exist (an unbounded dimension) is `None`. Enum members are `StrEnum`s whose values are
the words the service uses in event payloads and error metadata ("tokens", "run", "active").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

NANOS_PER_USD = 1_000_000_000

# An amount of one dimension: an int (tokens, tool calls, retries) or Decimal USD (cost).
Quantity = int | Decimal


def nanos_to_usd(nanos: int) -> Decimal:
    """Exact and without trailing zeros: 1_250_000_000 -> Decimal("1.25"), 0 -> Decimal("0")
    (never `0E-9`). Exact division of integers below 10**19 fits Decimal's 28 digits."""
    return Decimal(nanos) / NANOS_PER_USD


def usd(amount: str | int | Decimal) -> int:
    """Exact USD -> nanos from a decimal string, int or Decimal (never a float): usd("0.25")."""
    if isinstance(amount, float):
        raise TypeError("pass USD as a str, int or Decimal, never a float")
    nanos = Decimal(str(amount)).scaleb(9)
    if nanos != nanos.to_integral_value():
        raise ValueError(f"{amount} USD is finer than a nano")
    return int(nanos)


class Dimension(enum.StrEnum):
    """A budget dimension; the value is its OpenWOP name. MODEL_CALLS is ration's extension
    for pools only (`ScopeBudget.max_model_calls`): a pool's status and its own events on the
    tenant stream name it "modelCalls"; a run's own balance and events never do."""

    TOKENS = "tokens"
    COST = "cost"
    TOOL_CALLS = "toolCalls"
    RETRIES = "retries"
    MODEL_CALLS = "modelCalls"


class Scope(enum.StrEnum):
    """Where a budget is declared: the run itself, or its workflow, agent or project."""

    RUN = "run"
    WORKFLOW = "workflow"
    AGENT = "agent"
    PROJECT = "project"
    END_USER = "end_user"  # pooled budgets of the run's end_user_id
    API_KEY = "api_key"  # pooled budgets of the issued key a run was opened with


class ScopeBudgetKind(enum.StrEnum):
    """A cap on each run of the scope, or one balance shared by all of them."""

    PER_RUN_CAP = "per_run_cap"
    POOLED = "pooled"


class Window(enum.StrEnum):
    """The calendar window (UTC) of a pool's balance."""

    NONE = "none"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    MINUTE = "minute"
    HOUR = "hour"


class Enforcement(enum.StrEnum):
    HARD = "hard"
    ADVISORY = "advisory"


class OnExhaustion(enum.StrEnum):
    FAIL = "fail"
    INTERRUPT = "interrupt"


class RunState(enum.StrEnum):
    ACTIVE = "active"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CLOSED = "closed"


class RunOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReserveMode(enum.StrEnum):
    """ALL_OR_NOTHING grants the estimate or refuses; UP_TO may grant less tokens and cost."""

    ALL_OR_NOTHING = "all_or_nothing"
    UP_TO = "up_to"


class ReservationState(enum.StrEnum):
    OPEN = "open"
    CONSUMED = "consumed"
    RELEASED = "released"
    EXPIRED = "expired"


class RunEventType(enum.StrEnum):
    """The OpenWOP event type names."""

    BUDGET_RESERVED = "budget.reserved"
    BUDGET_CONSUMED = "budget.consumed"
    BUDGET_THRESHOLD_CROSSED = "budget.threshold.crossed"
    BUDGET_EXHAUSTED = "budget.exhausted"
    CAP_BREACHED = "cap.breached"
    RUN_FAILED = "run.failed"


class SpendGroupBy(enum.StrEnum):
    """What the rows of a spend report group by."""

    PROJECT = "project"
    WORKFLOW = "workflow"
    AGENT = "agent"
    MODEL = "model"
    DAY = "day"
    HOUR = "hour"
    END_USER = "end_user"
    API_KEY = "api_key"
    TAG = "tag"  # the values of one tag key (tag_key=...)


@dataclass(frozen=True)
class Amounts:
    """Amounts per dimension: what a call passes (estimate, usage, delta) and what a hold was
    granted. Cost is integer nanos of USD (`usd("0.01")` makes them); `.cost` reads it as USD."""

    tokens: int = 0
    cost_nanos: int = 0
    tool_calls: int = 0
    retries: int = 0

    @property
    def cost(self) -> Decimal:
        return nanos_to_usd(self.cost_nanos)


@dataclass(frozen=True)
class DimensionStatus:
    """One dimension of one balance (the run's own, or a pool's) as of the database clock.
    Cost amounts are Decimal USD; `limit` and `remaining` are None when unbounded."""

    dimension: Dimension
    limit: Quantity | None
    consumed: Quantity
    held: Quantity
    remaining: Quantity | None
    binding_scope: Scope
    binding_scope_id: str  # empty for the run itself
    clamped_by: str  # "host" when a host ceiling clamped the limit
    window_end: datetime | None = None  # a windowed pool's: when its current window ends


@dataclass(frozen=True)
class EffectiveBudget:
    """A run's limits after resolution; None means unbounded."""

    max_tokens: int | None
    max_cost: Decimal | None
    max_tool_calls: int | None
    max_retries: int | None
    threshold_percent: int
    on_exhaustion: OnExhaustion

    def limit(self, dimension: Dimension) -> Quantity | None:
        return {
            Dimension.TOKENS: self.max_tokens,
            Dimension.COST: self.max_cost,
            Dimension.TOOL_CALLS: self.max_tool_calls,
            Dimension.RETRIES: self.max_retries,
        }[dimension]


@dataclass(frozen=True)
class Run:
    run_id: str
    project_id: str
    workflow_id: str  # empty: no workflow scope
    agent_id: str  # empty: no agent scope
    state: RunState
    effective_budget: EffectiveBudget
    # The run's own four dimensions (its budget, whichever scope's cap binds it).
    dimensions: tuple[DimensionStatus, ...]
    policy_version: int
    outcome: RunOutcome | None  # set by CloseRun
    failure_code: str  # "budget_exhausted" when a breach failed the run
    created_at: datetime
    updated_at: datetime
    advisory: bool
    advisory_refusals: int
    # Each bounded dimension of each pool the run draws on, in its current window: shared with
    # the pool's other runs; `binding_scope` and `binding_scope_id` name the pool.
    pools: tuple[DimensionStatus, ...] = ()
    end_user_id: str = ""  # empty: none
    api_key_id: str = ""  # the issued key the run was opened with, if any
    tags: Mapping[str, str] = field(default_factory=dict)

    def status(self, dimension: Dimension) -> DimensionStatus:
        """The run's own status of a dimension."""
        return next(s for s in self.dimensions if s.dimension is dimension)


@dataclass(frozen=True)
class ReservationInfo:
    """A hold as the server reported it."""

    reservation_id: str
    run_id: str
    model: str
    requested: Amounts
    granted: Amounts
    state: ReservationState
    expires_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class ReserveResult:
    reservation: ReservationInfo
    dimensions: tuple[DimensionStatus, ...]
    advisory_refusal_reason: str  # advisory mode: the refusal a hard host would have given


@dataclass(frozen=True)
class ConsumeResult:
    overrun: Amounts  # usage above the settled hold
    dimensions: tuple[DimensionStatus, ...]
    state: RunState
    reservation_state: ReservationState | None  # None when no hold was named
    # Fail-open: the service was unreachable, the consume is in the local journal and will be
    # replayed (dimensions are then empty and state is not known: ACTIVE).
    journaled: bool = False


@dataclass(frozen=True)
class CloseResult:
    run: Run
    released_holds: int


@dataclass(frozen=True)
class ModelVerdict:
    allowed: bool
    scope: Scope | None  # the scope whose lists denied the model; None when allowed
    scope_id: str


@dataclass(frozen=True)
class CheckResult:
    would_grant: bool
    refusal_reason: str  # empty when it would be granted
    state: RunState
    dimensions: tuple[DimensionStatus, ...]
    model_verdict: ModelVerdict | None  # None when no model was asked about
    advisory_refusal_reason: str


@dataclass(frozen=True)
class RunEvent:
    """One event of a run's log. `payload` is the OpenWOP JSON payload (cost in USD, numbers
    with a fraction as Decimal); `payload_json` the same text, to forward verbatim."""

    run_id: str
    seq: int
    type: RunEventType
    created_at: datetime
    payload_json: str
    payload: Mapping[str, Any] = field(compare=False)


@dataclass(frozen=True)
class TenantEvent:
    """One message of a tenant's event stream: an event of one of its runs with the run's
    owners, or a checkpoint (`event` None: the stream read past events the filter did not
    match). Pass `cursor` back as `after_cursor` to resume right after it."""

    cursor: str
    event: RunEvent | None
    project_id: str = ""
    workflow_id: str = ""
    agent_id: str = ""
    # A pooled budget's own event (threshold crossed, exhausted; once per pool, window and
    # dimension): its scope, scope id and window start; event.run_id is then empty.
    pool_scope: Scope | None = None
    pool_scope_id: str = ""
    pool_window_start: datetime | None = None


@dataclass(frozen=True)
class Policy:
    """A budget policy as stored (scope budgets); None limits are unbounded, a None allow list
    means no allow list (an empty one allows nothing)."""

    max_tokens: int | None = None
    max_cost: Decimal | None = None
    max_tool_calls: int | None = None
    max_retries: int | None = None
    model_allow: tuple[str, ...] | None = None
    model_deny: tuple[str, ...] = ()
    threshold_percent: int | None = None
    on_exhaustion: OnExhaustion = OnExhaustion.FAIL


@dataclass(frozen=True)
class PoolBalance:
    window_start: datetime  # UTC; the Unix epoch for Window.NONE
    dimensions: tuple[DimensionStatus, ...]


@dataclass(frozen=True)
class ScopeBudget:
    scope: Scope
    scope_id: str
    kind: ScopeBudgetKind
    policy: Policy
    window: Window
    enforcement: Enforcement
    version: int
    updated_at: datetime
    balance: PoolBalance | None = None  # GetScopeBudget of a pool: its current window
    model_match: str = ""  # a pool that applies only to calls whose model matches this glob
    max_model_calls: int | None = None  # a pool's model calls per window; None: unbounded


@dataclass(frozen=True)
class ScopeBudgetPage:
    budgets: tuple[ScopeBudget, ...]  # as stored, without balances
    next_page_token: str  # empty on the last page


@dataclass(frozen=True)
class Capabilities:
    """The OpenWOP `budget` and `limits` blocks; `capabilities_json` is their JSON."""

    dimensions: tuple[str, ...]
    enforcement: Enforcement
    scope_levels: tuple[Scope, ...]
    max_budget_tokens: int | None
    max_budget_cost: Decimal | None
    capabilities_json: str


@dataclass(frozen=True)
class SpendRow:
    """The sums of one group's recorded usage in the report's window."""

    key: str  # project, workflow or agent id, model id, or the bucket start (RFC 3339 UTC)
    bucket_start: datetime | None  # DAY and HOUR only
    cost_nanos: int
    tokens: int
    tool_calls: int
    retries: int
    consume_count: int

    @property
    def cost(self) -> Decimal:
        return nanos_to_usd(self.cost_nanos)


@dataclass(frozen=True)
class SpendPage:
    rows: tuple[SpendRow, ...]
    next_page_token: str  # empty on the last page
