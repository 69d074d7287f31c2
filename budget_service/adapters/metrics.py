"""Budget domain metrics (DESIGN 7); counted from a Tally only after its transaction commits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from budget_service.domain import events as ev
from budget_service.domain.events import NANOS_PER_USD
from budget_service.domain.policy import AnyDimension, Dimension, Enforcement, PoolDimension, Scope
from budget_service.domain.run_state import Balance, BalanceRef, ReservationState
from servicekit.labels import MetricLabels

# Labels come from bounded sets only: dimensions, reasons, states and scope kinds are the
# server's own; models go through the allow list or the first N distinct, then `other`; the
# tenant, project and pool scope id appear only with RATION_METRICS_TENANT_LABELS, bounded the
# same way (never an end-user's id). Never run, reservation, request or user ids.

# Each pool gauge's unit, by dimension: one unit per metric name.
POOL_UNITS: dict[AnyDimension, str] = {
    Dimension.TOKENS: "tokens",
    Dimension.COST: "usd",
    Dimension.TOOL_CALLS: "tool_calls",
    Dimension.RETRIES: "retries",
    PoolDimension.MODEL_CALLS: "model_calls",  # a pool's model calls (requests) per window
}
# Counted per (tenant, project[, model]): relabelled on the way out (BudgetMetrics._spend_labels).
SPEND_METRICS = frozenset(("tokens", "cost", "tool_calls", "retries"))

# One pooled budget's current window as a gauge refresh sees it.
PoolBalances = tuple[str, BalanceRef, Mapping[AnyDimension, Balance]]


@dataclass
class Tally:
    """Metric increments gathered inside a transaction: (metric, labels, amount)."""

    items: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)

    def add(self, metric: str, *labels: str, amount: float = 1.0) -> None:
        self.items.append((metric, labels, amount))

    def decision(self, decision: str, outcome: str, reason: str = "") -> None:
        self.add("decisions", decision, outcome, reason)

    def refused(self, reason: str, scope: Scope) -> None:
        """A hard Reserve refusal, and the scope whose balance or policy refused it."""
        self.decision("reserve", "refused", reason)
        self.add("refusals", scope.value, reason)

    def consumed(
        self, tenant: str, project: str, model: str, usage: Mapping[Dimension, int]
    ) -> None:
        who = (tenant, project)
        self.add("tokens", *who, model, amount=usage.get(Dimension.TOKENS, 0))
        self.add("cost", *who, model, amount=usage.get(Dimension.COST, 0) / NANOS_PER_USD)
        self.add("tool_calls", *who, amount=usage.get(Dimension.TOOL_CALLS, 0))
        self.add("retries", *who, amount=usage.get(Dimension.RETRIES, 0))

    def events(self, emitted: Iterable[ev.BudgetEvent], enforcement: Enforcement) -> None:
        for event in emitted:
            if isinstance(event, ev.ThresholdCrossed):
                self.add("crossings", event.dimension.value)
            elif isinstance(event, ev.BudgetExhausted):
                self.add("exhaustions", event.dimension.value)
            elif isinstance(event, ev.CapBreached):
                self.add("breaches", event.dimension.value, enforcement.value)

    def reservations_ended(self, states: Iterable[ReservationState]) -> None:
        for state in states:
            self.add("holds_ended", state.value)
            if state is ReservationState.EXPIRED:
                self.add("holds_expired")
                self.add("decisions", "expire", "recorded", "")

    def overruns(self, overrun: Mapping[Dimension, int]) -> None:
        for dimension, amount in overrun.items():
            if amount > 0:
                self.add("overruns", dimension.value)


_DIMENSIONS = tuple(Dimension)


def decision_tally(
    facts: Mapping[str, Any], tenant: str, model: str, amounts: Mapping[Dimension, int]
) -> Tally:
    """What one committed decision of budget.decide_v3 counts, from the facts it returned
    (`amounts` is the call's estimate or usage)."""
    tally = Tally()
    expired = int(facts.get("expired", 0))
    if expired:
        tally.reservations_ended([ReservationState.EXPIRED] * expired)
    decision, outcome = str(facts["decision"]), facts.get("outcome")
    if outcome is None:  # refused before any decision was counted (e.g. no such hold)
        return tally
    reason, enforcement = str(facts.get("reason") or ""), str(facts["enforcement"])
    if decision == "reserve" and outcome == "refused":
        tally.refused(reason, Scope(facts["scope"]))
    else:
        tally.decision(decision, str(outcome), reason)
    if outcome == "advisory_refused" and decision == "reserve":
        tally.add("advisory_refusals", reason)
    breach = facts.get("breach_dim")
    for event in facts.get("events", ()):
        if event == "budget.exhausted" and breach:
            tally.add("exhaustions", breach)
        elif event == "cap.breached" and breach:
            tally.add("breaches", breach, enforcement)
    for dimension in facts.get("crossed", ()):
        tally.add("crossings", dimension)
    for dimension in facts.get("exhausted", ()):
        tally.add("exhaustions", dimension)
    for dimension in facts.get("pool_crossed", ()):
        tally.add("crossings", dimension)
    for dimension in facts.get("pool_exhausted", ()):
        tally.add("exhaustions", dimension)
    for dimension in facts.get("breached", ()):
        tally.add("breaches", dimension, enforcement)
    if facts.get("opened"):
        tally.add("holds_opened")
    if facts.get("ended"):
        tally.reservations_ended([ReservationState(facts["ended"])])
    if decision == "consume" and outcome == "recorded":
        tally.consumed(tenant, str(facts["project"]), model, amounts)
        overrun = facts.get("overrun") or (0, 0, 0, 0)
        tally.overruns(dict(zip(_DIMENSIONS, (int(n) for n in overrun), strict=True)))
    return tally


def pool_value(dimension: AnyDimension, amount: int) -> float:
    """An amount in its gauge's unit: cost in USD, the others as counted."""
    return amount / NANOS_PER_USD if dimension is Dimension.COST else float(amount)


class BudgetMetrics:
    """The `ration_budget_*` series, registered on the server's registry."""

    def __init__(self, registry: CollectorRegistry, labels: MetricLabels | None = None) -> None:
        labels = labels or MetricLabels()
        self._models = labels.models()
        self._tenant_labels = labels.tenant_labels
        self._tenants, self._projects = labels.tenant_values(), labels.tenant_values()
        self._scope_ids = labels.tenant_values()
        self._max_pools = labels.max_pools
        who = ("tenant", "project") if labels.tenant_labels else ()

        def counter(name: str, doc: str, *names: str) -> Counter:
            return Counter(f"ration_budget_{name}", doc, names, registry=registry)

        self._counters: dict[str, Counter] = {
            "tokens": counter("consumed_tokens", "Tokens recorded by Consume.", *who, "model"),
            "cost": counter(
                "consumed_cost_usd", "Aggregate cost recorded by Consume, USD.", *who, "model"
            ),
            "tool_calls": counter("consumed_tool_calls", "Tool calls recorded.", *who),
            "retries": counter("consumed_retries", "Retries recorded.", *who),
            "decisions": counter(
                "decisions", "Budget decisions by outcome.", "decision", "outcome", "reason"
            ),
            "refusals": counter(
                "refusals",
                "Reserve refusals by the scope whose balance or policy refused.",
                "scope",
                "reason",
            ),
            "crossings": counter(
                "threshold_crossings", "budget.threshold.crossed events.", "dimension"
            ),
            "exhaustions": counter("exhaustions", "budget.exhausted events.", "dimension"),
            "breaches": counter("breaches", "cap.breached events.", "dimension", "enforcement"),
            "advisory_refusals": counter(
                "advisory_refusals", "Would-be refusals in advisory mode.", "reason"
            ),
            "holds_opened": counter("holds_opened", "Holds granted by Reserve."),
            "holds_ended": counter("holds_ended", "Holds ended, by final state.", "state"),
            "holds_expired": counter("holds_expired", "Holds that expired unconsumed."),
            "overruns": counter("overruns", "Consumes above their hold.", "dimension"),
        }
        sizes = (1, 2, 4, 8, 16, 32, 64, 128)
        self.batch_size = Histogram(
            "ration_budget_decide_batch_size",
            "Reserve/Consume/Release requests per budget.decide_v3 statement (group commit).",
            buckets=sizes,
            registry=registry,
        )
        self.check_batch_size = Histogram(
            "ration_budget_check_batch_size",
            "Check requests per read-only budget.decide_v3 statement.",
            buckets=sizes,
            registry=registry,
        )
        self.paced_seconds = Counter(
            "ration_budget_paced_seconds",
            "Seconds batches were held by fair pacing (RATION_BUDGET_FAIR_PACING) because"
            " their caller was ahead of every other one with calls waiting.",
            registry=registry,
        )
        self.locked_run_waits = Counter(
            "ration_budget_locked_run_waits",
            "Reserve/Consume/Release requests whose run was locked elsewhere when their batch"
            " came to it, sent again to wait for that run's lock alone.",
            registry=registry,
        )
        # Each series' child by (metric, exposed labels), so counting costs no label lookup.
        # Bounded like the series: exposed labels come from bounded sets only (see above),
        # and these counters never drop a series.
        self._children: dict[tuple[str, tuple[str, ...]], Counter] = {}
        self.reservations_open = Gauge(
            "ration_budget_holds_open", "Open, unexpired holds (all replicas).", registry=registry
        )
        pool_labels = ("scope", "rank") + (("tenant", "scope_id") if labels.tenant_labels else ())
        self.pool_remaining: dict[AnyDimension, Gauge] = {}
        self.pool_limit: dict[AnyDimension, Gauge] = {}
        for dimension, unit in POOL_UNITS.items():
            self.pool_remaining[dimension] = Gauge(
                f"ration_budget_pool_remaining_{unit}",
                f"Remaining {unit} of the most depleted pooled budgets of each scope kind in "
                "their current window (rank 1 = least left relative to its limit).",
                pool_labels,
                registry=registry,
            )
            self.pool_limit[dimension] = Gauge(
                f"ration_budget_pool_limit_{unit}",
                f"The {unit} limit of the pooled budget at the same scope and rank.",
                pool_labels,
                registry=registry,
            )
        self._pool_series: set[tuple[AnyDimension, tuple[str, ...]]] = set()

    def _spend_labels(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """(tenant, project[, model]) as exposed: bounded, and without ids unless opted in."""
        tenant, project, *model = labels
        models = tuple(self._models(m) for m in model)
        if not self._tenant_labels:
            return models
        return (self._tenants(tenant), self._projects(project), *models)

    def apply(self, tally: Tally) -> None:
        children = self._children
        for metric, labels, amount in tally.items:
            if amount == 0:
                continue
            if metric in SPEND_METRICS:
                labels = self._spend_labels(labels)
            key = (metric, labels)
            child = children.get(key)
            if child is None:
                counter = self._counters[metric]
                child = children[key] = counter.labels(*labels) if labels else counter
            child.inc(amount)

    def set_pools(self, pools: Iterable[PoolBalances]) -> None:
        """Replaces the pool gauges with the `max_pools` most depleted pools of each scope kind
        and unit; series no longer ranked disappear."""
        ranked: dict[tuple[AnyDimension, Scope], list[tuple[float, int, str, str, int]]] = {}
        for tenant, ref, balances in pools:
            for dimension, balance in balances.items():
                if balance.limit is None or balance.remaining is None:
                    continue
                share = balance.remaining / balance.limit if balance.limit else 0.0
                entry = (share, balance.remaining, tenant, ref.scope_id, balance.limit)
                ranked.setdefault((dimension, ref.scope), []).append(entry)
        series: set[tuple[AnyDimension, tuple[str, ...]]] = set()
        for (dimension, scope), entries in ranked.items():
            entries.sort()
            for rank, (_, remaining, tenant, scope_id, limit) in enumerate(
                entries[: self._max_pools], start=1
            ):
                labels: tuple[str, ...] = (scope.value, str(rank))
                if self._tenant_labels:
                    # An end-user id is never a label, even opted in (issue 27): "" stands in.
                    shown = "" if scope is Scope.END_USER else self._scope_ids(scope_id)
                    labels += (self._tenants(tenant), shown)
                self.pool_remaining[dimension].labels(*labels).set(pool_value(dimension, remaining))
                self.pool_limit[dimension].labels(*labels).set(pool_value(dimension, limit))
                series.add((dimension, labels))
        for dimension, labels in self._pool_series - series:
            self.pool_remaining[dimension].remove(*labels)
            self.pool_limit[dimension].remove(*labels)
        self._pool_series = series
