"""`ration notify`'s Prometheus metrics: lag, deliveries, failures and retries per webhook."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from budget_service.domain.alerts import Webhook
from servicekit.labels import MetricLabels

# The `webhook` label is the webhook's id, a name the operator chose in the webhooks file
# (bounded: one per row). The tenant is a label only with RATION_METRICS_TENANT_LABELS; without
# it, webhooks of different tenants with one id share their series (counters add up, the lag
# is the largest, the leases add up).


class Followed(Protocol):
    """What the metrics read of a follower (usecases.notifier.Follower) at scrape time."""

    webhook: Webhook

    @property
    def holding(self) -> bool: ...

    def lag_seconds(self) -> float: ...


def _outcome(status: int) -> str:
    """A failed attempt's kind: `http_4xx` (or 3xx, 5xx...) by the answer, else `no_answer`
    (a network error or the deadline)."""
    return f"http_{status // 100}xx" if status else "no_answer"


class NotifyMetrics:
    def __init__(self, registry: CollectorRegistry, labels: MetricLabels) -> None:
        self._tenant_labels = labels.tenant_labels
        names = ("webhook", "tenant") if self._tenant_labels else ("webhook",)
        self._tenant_values = labels.tenant_values()
        self.lag = Gauge(
            "ration_notify_lag_seconds",
            "How far the webhook's deliveries are behind its tenant's event stream: the age of"
            " the event being delivered, or the time since all were delivered (lease holder).",
            names,
            registry=registry,
        )
        self.leases = Gauge(
            "ration_notify_leases",
            "Webhook leases this process holds (it delivers those webhooks).",
            names,
            registry=registry,
        )
        self.deliveries = Counter(
            "ration_notify_deliveries",
            "Alerts the receiver acknowledged (answered 2xx).",
            names,
            registry=registry,
        )
        self.failures = Counter(
            "ration_notify_failures",
            "POST attempts that failed (and are retried), by outcome.",
            (*names, "outcome"),
            registry=registry,
        )
        self.retries = Counter(
            "ration_notify_retries",
            "POST attempts that repeated a failed one.",
            names,
            registry=registry,
        )

    def _names(self, webhook: Webhook) -> tuple[str, ...]:
        if self._tenant_labels:
            return (webhook.id, self._tenant_values(webhook.tenant))
        return (webhook.id,)

    def follow(self, followers: Sequence[Followed]) -> None:
        """Reads lag and leases from these followers at each scrape."""
        groups: dict[tuple[str, ...], list[Followed]] = {}
        for follower in followers:
            groups.setdefault(self._names(follower.webhook), []).append(follower)

        def lag(group: list[Followed]) -> Callable[[], float]:
            return lambda: max(f.lag_seconds() for f in group)

        def held(group: list[Followed]) -> Callable[[], float]:
            return lambda: float(sum(f.holding for f in group))

        for names, group in groups.items():
            self.lag.labels(*names).set_function(lag(group))
            self.leases.labels(*names).set_function(held(group))
            self.deliveries.labels(*names)  # every series exists from the start, at 0
            self.retries.labels(*names)

    def delivered(self, webhook: Webhook) -> None:
        self.deliveries.labels(*self._names(webhook)).inc()

    def failed(self, webhook: Webhook, status: int) -> None:
        self.failures.labels(*self._names(webhook), _outcome(status)).inc()

    def retried(self, webhook: Webhook) -> None:
        self.retries.labels(*self._names(webhook)).inc()
