"""Bounded metric label values (DESIGN 7): allow-listed or the first N distinct, then `other`."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from servicekit.settings import Env

# The value every label falls back to once its bound is reached.
OTHER = "other"


class BoundedValues:
    """The values one label may take: a value the allow list admits (any, when the list is
    empty) keeps its name while fewer than `limit` distinct values are known; every other
    value is `other`. The known set only grows, so a series, once exposed, keeps its name.

    Every caller-supplied label value goes through one of these: a label then has at most
    `limit` + 1 values however many distinct strings callers send."""

    def __init__(self, limit: int, allow: tuple[str, ...] = ()) -> None:
        self._limit = limit
        self._allow = allow
        self._known: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._known:
            return value
        if len(self._known) >= self._limit or not self._admits(value):
            return OTHER
        self._known.add(value)
        return value

    def _admits(self, value: str) -> bool:
        return not self._allow or any(fnmatch.fnmatchcase(value, glob) for glob in self._allow)


@dataclass(frozen=True)
class MetricLabels:
    """Which caller-supplied values the domain metrics may carry as labels (RATION_METRICS_*)."""

    # Globs of the model ids that become label values; empty = any model, first come.
    model_allow: tuple[str, ...] = ()
    max_models: int = 50
    # Tenant-supplied identifiers (tenant, project, pool scope id) as labels: off unless the
    # operator runs ration for themselves alone, since /metrics has no authentication.
    tenant_labels: bool = False
    max_tenant_values: int = 50
    # Pooled budgets reported per scope kind and unit, most depleted first (budget service).
    max_pools: int = 10

    @classmethod
    def from_env(cls, env: Env) -> MetricLabels:
        allow = env.text("RATION_METRICS_MODELS", "")
        return cls(
            model_allow=tuple(glob.strip() for glob in allow.split(",") if glob.strip()),
            max_models=env.integer("RATION_METRICS_MAX_MODELS", cls.max_models, minimum=0),
            tenant_labels=env.flag("RATION_METRICS_TENANT_LABELS", cls.tenant_labels),
            max_tenant_values=env.integer(
                "RATION_METRICS_MAX_TENANT_VALUES", cls.max_tenant_values, minimum=0
            ),
            max_pools=env.integer("RATION_METRICS_MAX_POOLS", cls.max_pools, minimum=1),
        )

    def models(self) -> BoundedValues:
        return BoundedValues(self.max_models, self.model_allow)

    def tenant_values(self) -> BoundedValues:
        """One tenant-supplied label's values (used only with `tenant_labels`)."""
        return BoundedValues(self.max_tenant_values)
