"""What a figure cost: CPU per RPC of each part (server, Postgres, load) and the mean batch size.

The load generator takes a `Snapshot` when its measured window opens and when it closes (or when
every load process is done, if that comes first); the figure gets the differences."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import procstat

PARTS = ("server", "postgres", "load")
# The budget batcher's histogram (servicekit/batching.py): _sum / _count is the mean batch size.
BATCH_METRIC = "ration_budget_decide_batch_size"


def metric_totals(text: str, names: Iterable[str]) -> dict[str, float]:
    """The sum over all label sets of each named sample in a Prometheus text exposition; names
    that do not occur are left out."""
    wanted = set(names)
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        if brace >= 0:
            name, rest = line[:brace], line[line.rfind("}") + 1 :]
        else:
            name, _, rest = line.partition(" ")
        if name not in wanted:
            continue
        value = rest.split()
        if value:
            totals[name] = totals.get(name, 0.0) + float(value[0])
    return totals


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counters at one moment: CPU ticks per part (None: not measurable here),
    the machine's busy ticks, and the scraped metric totals (None: nothing to scrape)."""

    at: float
    ticks: dict[str, int | None]
    busy: int | None
    metrics: dict[str, float] | None = None


@dataclass(frozen=True)
class Meter:
    """Takes snapshots of the server's process tree, the Postgres cluster's (the postmaster and
    every backend it forked) and the load processes', and scrapes `metrics` from the server."""

    server: Sequence[int] = ()
    postgres: int | None = None
    scrape: Callable[[], dict[str, float] | None] | None = None
    hz: int = field(default_factory=procstat.clock_ticks)

    def snapshot(self, load: Sequence[int]) -> Snapshot:
        at = time.monotonic()
        table = procstat.process_table()
        roots = {
            "server": list(self.server),
            "postgres": [self.postgres] if self.postgres else [],
            "load": list(load),
        }
        ticks: dict[str, int | None] = {
            part: procstat.measured_ticks(pids, table) for part, pids in roots.items()
        }
        metrics = self.scrape() if self.scrape else None
        return Snapshot(at, ticks, procstat.machine_busy(), metrics)


def _ms(ticks: int, hz: int, rpcs: int) -> float:
    return round(ticks / hz * 1e3 / rpcs, 3)


def cpu_per_rpc(before: Snapshot, after: Snapshot, rpc_per_s: float, hz: int) -> dict[str, Any]:
    """`<part>_ms_per_rpc` for server, postgres and load (None when a part is not measurable),
    their total, and `other_ms_per_rpc`: the rest of the machine's busy time (other processes,
    interrupts, the bench parent) over the same interval; None when a term is missing.

    The divisor is the RPCs completed in the interval, counted as the figure's RPC/s × the
    interval: on a saturated machine the scheduler can wake the bench a few tens of ms after the
    window opens, and the window's own completion count would then be off by as much."""
    interval = after.at - before.at
    rpcs = round(rpc_per_s * interval)
    out: dict[str, Any] = {"cpu_interval_s": round(interval, 3), "cpu_rpcs": rpcs}
    if rpcs <= 0:
        return out

    def used(a: int | None, b: int | None) -> int | None:
        return max(0, b - a) if a is not None and b is not None else None

    def per_rpc(ticks: int | None) -> float | None:
        return None if ticks is None else round(ticks / hz * 1e3 / rpcs, 3)

    parts = {part: used(before.ticks.get(part), after.ticks.get(part)) for part in PARTS}
    for part, ticks in parts.items():
        out[f"{part}_ms_per_rpc"] = per_rpc(ticks)
    known = [ticks for ticks in parts.values() if ticks is not None]
    total = sum(known) if len(known) == len(parts) else None
    busy = used(before.busy, after.busy)
    out["total_ms_per_rpc"] = per_rpc(total)
    out["other_ms_per_rpc"] = per_rpc(
        None if busy is None or total is None else max(0, busy - total)
    )
    return out


def mean_batch_size(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> float | None:
    """Δ `<BATCH_METRIC>_sum` ÷ Δ `<BATCH_METRIC>_count` between two scrapes; None when a scrape
    failed, the metric is absent or no batch was decided in between. A series first seen in the
    second scrape (a labelled histogram's first observation) counts from zero."""
    total, count = f"{BATCH_METRIC}_sum", f"{BATCH_METRIC}_count"
    if before is None or after is None or total not in after or count not in after:
        return None
    batches = after[count] - before.get(count, 0.0)
    if batches <= 0:
        return None
    return round((after[total] - before.get(total, 0.0)) / batches, 2)


def shown(value: Any) -> str:
    """A per-RPC figure or mean batch as printed: two decimals, or n/a when not measured."""
    return f"{value:.2f}" if isinstance(value, int | float) else "n/a"
