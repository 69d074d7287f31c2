"""Budget policy: dimensions, validation, scope resolution, window kinds, model allow/deny."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Self


class Dimension(enum.StrEnum):
    """A budget dimension; the value is its OpenWOP JSON name, member order is the check order."""

    TOKENS = "tokens"
    COST = "cost"
    TOOL_CALLS = "toolCalls"
    RETRIES = "retries"

    @property
    def spec(self) -> DimensionSpec:
        return _SPECS[self]

    @property
    def breach_kind(self) -> str:
        return _SPECS[self].breach_kind

    @property
    def field_name(self) -> str:
        """The amount field (estimate, usage, delta) as it appears in request field paths."""
        return _SPECS[self].amount_field


@dataclass(frozen=True)
class DimensionSpec:
    breach_kind: str
    amount_field: str
    limit_field: str
    # Lower bounds follow the RFC schema: a zero token or tool-call budget is meaningless, while
    # a zero cost or retry budget is a real policy ("free models only", "never retry").
    min_limit: int
    # Upper bounds keep sums of a few amounts inside a Postgres bigint: cost is capped at one
    # billion USD, so even limit + consumed + held + estimate cannot overflow int64.
    max_amount: int


class PoolDimension(enum.StrEnum):
    """A dimension only a pooled budget bounds: ration's extension, never part of a run's own
    balance or events (RFC 0084's four dimensions stay the run event vocabulary)."""

    MODEL_CALLS = "modelCalls"  # requests per window: each Reserve or Consume naming a model


# What a status or a pool event is about: one of the four, or a pool's own dimension.
AnyDimension = Dimension | PoolDimension


def dimension_named(name: str) -> AnyDimension:
    """The dimension of an event payload or status row ("tokens", ..., "modelCalls")."""
    return PoolDimension(name) if name == PoolDimension.MODEL_CALLS else Dimension(name)


# Bounds of a pool's max_model_calls (0 stops every model call of the scope's runs).
MAX_MODEL_CALLS = 10**15

_SPECS = {
    Dimension.TOKENS: DimensionSpec("budget-tokens", "tokens", "max_tokens", 1, 10**15),
    Dimension.COST: DimensionSpec("budget-cost", "cost_nanos", "max_cost_nanos", 0, 10**18),
    Dimension.TOOL_CALLS: DimensionSpec(
        "budget-tool-calls", "tool_calls", "max_tool_calls", 1, 10**15
    ),
    Dimension.RETRIES: DimensionSpec("budget-retries", "retries", "max_retries", 0, 10**15),
}
DEFAULT_THRESHOLD_PERCENT = 80
# Every stored limit and running total (consumed, held; of runs and pools) is a Postgres bigint.
MAX_TOTAL = 2**63 - 1


class OnExhaustion(enum.StrEnum):
    FAIL = "fail"
    INTERRUPT = "interrupt"


class Enforcement(enum.StrEnum):
    """Hard refuses and stops runs; advisory (shadow roll-out) only emits events and counts."""

    HARD = "hard"
    ADVISORY = "advisory"


class Scope(enum.StrEnum):
    """Where a budget is declared; member order is narrowest first (the tie-break order)."""

    RUN = "run"
    WORKFLOW = "workflow"
    AGENT = "agent"
    PROJECT = "project"
    # Beyond the RFC's four (issue 27): pools only, after project in every order.
    END_USER = "end_user"  # the platform's customer a run works for (OpenRun end_user_id)
    API_KEY = "api_key"  # the issued key a run was opened with

    @property
    def rank(self) -> int:
        return _SCOPE_ORDER.index(self)


_SCOPE_ORDER: tuple[Scope, ...] = tuple(Scope)
# The RFC's (OpenWOP's) scopes: what a run's effective budget may be bound by.
RFC_SCOPES: tuple[Scope, ...] = (Scope.RUN, Scope.WORKFLOW, Scope.AGENT, Scope.PROJECT)
# Scopes that only pooled budgets may be declared at, without model lists.
POOL_ONLY_SCOPES: frozenset[Scope] = frozenset({Scope.END_USER, Scope.API_KEY})
HOST = "host"  # the binding source when a host ceiling, not a declared scope, sets the limit


class ScopeBudgetKind(enum.StrEnum):
    PER_RUN = "per_run"  # a cap on each run of the scope (the RFC's meaning)
    POOLED = "pooled"  # one balance shared by all runs of the scope


class Window(enum.StrEnum):
    NONE = "none"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    MINUTE = "minute"  # rate windows: tokens or cost per minute or per hour, as exact
    HOUR = "hour"


@dataclass(frozen=True)
class BudgetLimits:
    """The four dimension limits; None means unbounded."""

    max_tokens: int | None = None
    max_cost_nanos: int | None = None
    max_tool_calls: int | None = None
    max_retries: int | None = None

    def limit(self, dimension: Dimension) -> int | None:
        return {
            Dimension.TOKENS: self.max_tokens,
            Dimension.COST: self.max_cost_nanos,
            Dimension.TOOL_CALLS: self.max_tool_calls,
            Dimension.RETRIES: self.max_retries,
        }[dimension]

    def with_limits(self, limits: Mapping[Dimension, int | None]) -> Self:
        return replace(
            self,
            max_tokens=limits.get(Dimension.TOKENS, self.max_tokens),
            max_cost_nanos=limits.get(Dimension.COST, self.max_cost_nanos),
            max_tool_calls=limits.get(Dimension.TOOL_CALLS, self.max_tool_calls),
            max_retries=limits.get(Dimension.RETRIES, self.max_retries),
        )


# The host's `limits.maxBudgetTokens` / `limits.maxBudgetCostUsd` (in nanos); only tokens and
# cost are advertised, but a ceiling on any dimension would clamp the same way.
HostCeilings = BudgetLimits


@dataclass(frozen=True)
class BudgetPolicy(BudgetLimits):
    """RFC 0084 §A with cost in nanos (`maxCostUsd` becomes `max_cost_nanos`)."""

    model_allow: tuple[str, ...] | None = None  # None: no allow list; (): allows nothing
    model_deny: tuple[str, ...] = ()
    threshold_percent: int | None = None  # None: DEFAULT_THRESHOLD_PERCENT
    on_exhaustion: OnExhaustion = OnExhaustion.FAIL


@dataclass(frozen=True)
class ScopeBudget:
    """An operator-declared budget for a workflow, agent or project (threshold/on_exhaustion
    are ignored here: they always come from the run overlay)."""

    scope: Scope
    scope_id: str
    kind: ScopeBudgetKind
    policy: BudgetPolicy
    window: Window = Window.NONE
    # Per-scope shadow roll-out: runs under an advisory scope are never refused or stopped.
    enforcement: Enforcement = Enforcement.HARD
    # Pooled only: the pool applies to calls whose model matches this glob ("": every call).
    model_match: str = ""
    # Pooled only: model calls per window (None: unbounded).
    max_model_calls: int | None = None


@dataclass(frozen=True)
class ModelLists:
    """One scope's model allow/deny lists, kept on the run so Reserve needs no scope lookups."""

    scope: Scope
    allow: tuple[str, ...] | None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelVerdict:
    allowed: bool
    scope: Scope | None = None  # the scope whose list refused the model
    scope_id: str = ""  # its id (project, workflow or agent id); empty for the run


@dataclass(frozen=True)
class EffectiveBudget(BudgetLimits):
    """What a run is judged under: resolved once at OpenRun, stored, raised only by ResumeRun."""

    threshold_percent: int = DEFAULT_THRESHOLD_PERCENT
    on_exhaustion: OnExhaustion = OnExhaustion.FAIL
    # Per bounded dimension: "run", "workflow", "agent", "project" or HOST.
    binding: Mapping[Dimension, str] = field(default_factory=dict, hash=False)
    model_lists: tuple[ModelLists, ...] = ()

    @property
    def scope(self) -> Scope:
        """The `budget.reserved` scope: the narrowest declared scope binding any dimension.

        OpenWOP's enum has no "host", so a budget bound only by host ceilings reports "run".
        """
        bound = [Scope(s) for s in self.binding.values() if s != HOST]
        return min(bound, key=lambda s: s.rank, default=Scope.RUN)


def glob_matches(pattern: str, model: str) -> bool:
    """Exact, case-sensitive match where `*` matches any run (even empty, even `/`).

    Not fnmatch: it gives `[`, `]` and `?` meaning, which model ids must not have.
    """
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == model
    head, middle, tail = parts[0], parts[1:-1], parts[-1]
    if len(model) < len(head) + len(tail) or not model.startswith(head):
        return False
    if not model.endswith(tail):
        return False
    # Leftmost matching of each middle piece is optimal for `*`-only globs: it leaves the
    # longest remainder for the pieces after it.
    position, end = len(head), len(model) - len(tail)
    for piece in middle:
        found = model.find(piece, position, end)
        if found < 0:
            return False
        position = found + len(piece)
    return True


def model_verdict(model: str, lists: Sequence[ModelLists]) -> ModelVerdict:
    """Deny wins across all scopes; then every declared allow list must match (narrowest first)."""
    ordered = sorted(lists, key=lambda entry: entry.scope.rank)
    for entry in ordered:
        if any(glob_matches(glob, model) for glob in entry.deny):
            return ModelVerdict(False, entry.scope)
    for entry in ordered:
        if entry.allow is not None and not any(glob_matches(g, model) for g in entry.allow):
            return ModelVerdict(False, entry.scope)
    return ModelVerdict(True)


def resolve_effective_budget(
    run_policy: BudgetPolicy,
    scope_budgets: Sequence[ScopeBudget] = (),
    ceilings: BudgetLimits | None = None,
) -> EffectiveBudget:
    """Per dimension the minimum over the run overlay and every per-run scope cap, then clamped
    to the host ceiling; pooled budgets bind at Reserve time, but their model lists count here."""
    ceilings = ceilings or BudgetLimits()
    caps = [(Scope.RUN, run_policy)] + sorted(
        ((b.scope, b.policy) for b in scope_budgets if b.kind is ScopeBudgetKind.PER_RUN),
        key=lambda cap: cap[0].rank,
    )
    limits: dict[Dimension, int | None] = {}
    binding: dict[Dimension, str] = {}
    for dimension in Dimension:
        best: int | None = None
        for scope, policy in caps:
            value = policy.limit(dimension)
            # Strictly smaller only: on a tie the narrower scope (earlier in caps) keeps binding.
            if value is not None and (best is None or value < best):
                best, binding[dimension] = value, scope.value
        ceiling = ceilings.limit(dimension)
        if ceiling is not None and (best is None or ceiling < best):
            best, binding[dimension] = ceiling, HOST
        limits[dimension] = best
    lists = [ModelLists(Scope.RUN, run_policy.model_allow, run_policy.model_deny)]
    lists += [ModelLists(b.scope, b.policy.model_allow, b.policy.model_deny) for b in scope_budgets]
    threshold = run_policy.threshold_percent
    return EffectiveBudget(
        threshold_percent=DEFAULT_THRESHOLD_PERCENT if threshold is None else threshold,
        on_exhaustion=run_policy.on_exhaustion,
        binding=binding,
        model_lists=tuple(
            sorted((e for e in lists if e.allow is not None or e.deny), key=_scope_rank)
        ),
    ).with_limits(limits)


def _scope_rank(entry: ModelLists) -> int:
    return entry.scope.rank


WINDOW_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # the one key of a window-less pool
