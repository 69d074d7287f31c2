"""Latency statistics: a mergeable log-bucketed histogram (about 1% precision) and percentiles."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Bucket i holds latencies in [GROWTH**i, GROWTH**(i+1)) microseconds: relative error < 1%.
GROWTH = 1.01
_LOG_GROWTH = math.log(GROWTH)


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) of `values` by the nearest-rank method."""
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is outside (0, 100]")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Histogram:
    """Counts of latencies by logarithmic bucket; merged across callers and processes."""

    buckets: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total_seconds: float = 0.0
    min_seconds: float = math.inf
    max_seconds: float = 0.0

    def record(self, seconds: float) -> None:
        micros = max(seconds * 1e6, 1.0)
        index = int(math.log(micros) / _LOG_GROWTH)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        self.count += 1
        self.total_seconds += seconds
        self.min_seconds = min(self.min_seconds, seconds)
        self.max_seconds = max(self.max_seconds, seconds)

    def merge(self, other: Histogram) -> None:
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.count += other.count
        self.total_seconds += other.total_seconds
        self.min_seconds = min(self.min_seconds, other.min_seconds)
        self.max_seconds = max(self.max_seconds, other.max_seconds)

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile in seconds: the middle of the bucket holding that rank."""
        if self.count == 0:
            raise ValueError("empty histogram")
        if not 0 < q <= 100:
            raise ValueError(f"percentile {q} is outside (0, 100]")
        rank = max(1, math.ceil(q / 100 * self.count))
        if rank == self.count:
            return self.max_seconds  # the extremes are kept exactly
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                middle = math.exp((index + 0.5) * _LOG_GROWTH) / 1e6
                return min(max(middle, self.min_seconds), self.max_seconds)
        return self.max_seconds  # unreachable: the counts add up to self.count

    @property
    def mean_seconds(self) -> float:
        return self.total_seconds / self.count if self.count else 0.0

    @classmethod
    def of(cls, samples: Iterable[float]) -> Histogram:
        hist = cls()
        for seconds in samples:
            hist.record(seconds)
        return hist


def summary_ms(hist: Histogram) -> dict[str, float]:
    """p50/p99/mean/max in milliseconds, rounded for reports."""
    if hist.count == 0:
        return {}
    return {
        "p50_ms": round(hist.percentile(50) * 1e3, 3),
        "p99_ms": round(hist.percentile(99) * 1e3, 3),
        "mean_ms": round(hist.mean_seconds * 1e3, 3),
        "max_ms": round(hist.max_seconds * 1e3, 3),
    }
