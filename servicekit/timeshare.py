"""A per-tenant share of time, kept by each process: a bucket of seconds that refills.

Concurrency caps bound how many of a tenant's calls run at once, not how much of the time they
take: one report at a time, back to back, still kept a database core busy for its tenant (issue
24). A TimeShare gives each tenant `share` seconds of work per second (a part of one core, say
0.25) and a bucket of at most `burst` seconds: each call spends what it took, at least
`min_cost`, and a tenant whose bucket is empty waits until it refilled (the caller is told how
long). A tenant that stays within its share never waits; others are not affected either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TimeShare:
    def __init__(
        self,
        share: float,
        burst: float,
        min_cost: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if share <= 0 or burst <= 0:
            raise ValueError("share and burst must be positive")
        self.share = share
        self.burst = burst
        self.min_cost = min_cost
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (seconds left, when)

    def _left(self, tenant: str, now: float) -> float:
        left, at = self._buckets.get(tenant, (self.burst, now))
        return min(self.burst, left + (now - at) * self.share)

    def wait_seconds(self, tenant: str) -> float:
        """0 when the tenant may start a call now; else how long until it may."""
        left = self._left(tenant, self._clock())
        return 0.0 if left > 0 else -left / self.share + 1e-3

    def spend(self, tenant: str, seconds: float) -> None:
        now = self._clock()
        left = self._left(tenant, now) - max(seconds, self.min_cost)
        if left >= self.burst:
            self._buckets.pop(tenant, None)
        else:
            self._buckets[tenant] = (left, now)
        if len(self._buckets) > 1024:  # full buckets need no entry
            for name in [t for t in self._buckets if self._left(t, now) >= self.burst]:
                del self._buckets[name]
