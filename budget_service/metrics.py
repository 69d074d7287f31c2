"""Budget domain metrics (DESIGN 7); counted from a Tally only after its transaction commits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from budget_service import events as ev
from budget_service.events import NANOS_PER_USD
from budget_service.policy import Dimension, Enforcement
from budget_service.state import HoldState

# Labels are bounded by design: project ids and model ids (model ids are bounded in practice by
# the allow lists operators declare; they are the provider's ids as given, never user input of
# unbounded variety), scope ids of declared budgets, dimensions, reasons and states. Never run,
# reservation, request or user ids.


@dataclass
class Tally:
    """Metric increments gathered inside a transaction: (metric, labels, amount)."""

    items: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)

    def add(self, metric: str, *labels: str, amount: float = 1.0) -> None:
        self.items.append((metric, labels, amount))

    def decision(self, decision: str, outcome: str, reason: str = "") -> None:
        self.add("decisions", decision, outcome, reason)

    def consumed(self, project: str, model: str, usage: Mapping[Dimension, int]) -> None:
        self.add("tokens", project, model, amount=usage.get(Dimension.TOKENS, 0))
        self.add("cost", project, model, amount=usage.get(Dimension.COST, 0) / NANOS_PER_USD)
        self.add("tool_calls", project, amount=usage.get(Dimension.TOOL_CALLS, 0))
        self.add("retries", project, amount=usage.get(Dimension.RETRIES, 0))

    def events(self, emitted: Iterable[ev.BudgetEvent], enforcement: Enforcement) -> None:
        for event in emitted:
            if isinstance(event, ev.ThresholdCrossed):
                self.add("crossings", event.dimension.value)
            elif isinstance(event, ev.BudgetExhausted):
                self.add("exhaustions", event.dimension.value)
            elif isinstance(event, ev.CapBreached):
                self.add("breaches", event.dimension.value, enforcement.value)

    def holds_ended(self, states: Iterable[HoldState]) -> None:
        for state in states:
            self.add("holds_ended", state.value)
            if state is HoldState.EXPIRED:
                self.add("holds_expired")
                self.add("decisions", "expire", "recorded", "")

    def overruns(self, overrun: Mapping[Dimension, int]) -> None:
        for dimension, amount in overrun.items():
            if amount > 0:
                self.add("overruns", dimension.value)


class BudgetMetrics:
    """The `ration_budget_*` series, registered on the server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(f"ration_budget_{name}", doc, labels, registry=registry)

        self._counters: dict[str, Counter] = {
            "tokens": counter("consumed_tokens", "Tokens recorded by Consume.", "project", "model"),
            "cost": counter(
                "consumed_cost_usd", "Aggregate cost recorded by Consume, USD.", "project", "model"
            ),
            "tool_calls": counter("consumed_tool_calls", "Tool calls recorded.", "project"),
            "retries": counter("consumed_retries", "Retries recorded.", "project"),
            "decisions": counter(
                "decisions", "Budget decisions by outcome.", "decision", "outcome", "reason"
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
        self.holds_open = Gauge(
            "ration_budget_holds_open", "Open, unexpired holds (all replicas).", registry=registry
        )
        # tenant is a label too: two tenants may both name a project "default".
        self.pool_remaining = Gauge(
            "ration_budget_pool_remaining",
            "Remaining budget of pooled scope budgets in their current window (cost in USD).",
            ("tenant", "scope", "scope_id", "dimension"),
            registry=registry,
        )
        self._pool_labels: set[tuple[str, str, str, str]] = set()

    def apply(self, tally: Tally) -> None:
        for metric, labels, amount in tally.items:
            if amount == 0:
                continue
            counter = self._counters[metric]
            (counter.labels(*labels) if labels else counter).inc(amount)

    def set_pools(self, remaining: Mapping[tuple[str, str, str, str], float]) -> None:
        """Replaces the pool gauges; pools deleted since the last refresh disappear."""
        for labels in self._pool_labels - remaining.keys():
            self.pool_remaining.remove(*labels)
        for labels, value in remaining.items():
            self.pool_remaining.labels(*labels).set(value)
        self._pool_labels = set(remaining)
