"""Noisy neighbour, budget and memory: tenant B's Reserve+Consume alone and under A's load.

One budget and one memory service, both with two tenants' tokens (bench/tenants.py), started
as users start them. Tenant B runs Reserve+Consume pairs on its own runs (B_CALLERS callers)
beside a few small appends to its memories, first alone, then while tenant A runs each noise:

- `noisy.reports`: A_REPORT_CALLERS callers looping ReportSpend (a year, by model or by hour,
  one group a page) over A's ledger of at least LEDGER_ROWS consume rows;
- `noisy.memory_writes`: A_WRITERS callers each appending A_ENTRIES entries of A_ENTRY_BYTES
  (900 KB, near the 1 MiB of text a write may carry; as in issue 24) to a new memory each;
- `noisy.hot_runs`: A_HOT_CALLERS callers hammering Reserve+Consume on A_HOT_RUNS runs.

A starts LEAD seconds before B's warm-up and runs until B's window closes, every call of A
recorded and none allowed past that moment (its deadline is A's whole period: a 900 KB write
can take longer than a window). B alone is measured right before each noise, so each ratio
compares two windows a few seconds apart (the database grows and autovacuum comes and goes
between figures). A's load processes run at nice A_CLIENT_NICE: A's clients stand for another
customer's machines, and on the bench's 2 cores at nice 0 they took CPU from B's own client and
B's servers that no service can give back (B's client runs at nice 0 and its CPU is in B's
figure). A's RPC/s and errors are reported beside B's figure (A being
throttled, RESOURCE_EXHAUSTED, is the point); the figure is B's p99 under A ÷ B's p99 alone
(DESIGN 5: at most 2).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc

from bench import budget, procstat, tenants
from bench.caller import auth, unary
from bench.database import BenchDatabase, admin
from bench.load import LoadSpec, run_together
from ration.budget.v1 import budget_pb2 as pb

if TYPE_CHECKING:
    from bench.runner import Runner

# In this order: A's memory writes outlast their calls (a started CPU job runs to its end), so
# they come last, and the services are stopped right after them.
NOISES = ("noisy.reports", "noisy.hot_runs", "noisy.memory_writes")
B_CALLERS = 8  # enough for a stable p99 of B's own, few enough to leave A the machine
B_APPEND_CALLERS = 2
B_RUNS, B_MEMORIES = 200, 16
A_REPORT_CALLERS, A_REPORT_RUNS, A_REPORT_PAIRS = 16, 10, 100
LEDGER_ROWS = 100_000
A_WRITERS, A_ENTRIES, A_ENTRY_BYTES = 36, 60, 15_000
A_HOT_CALLERS, A_HOT_RUNS = 64, 16
LEAD = 1.0
A_CLIENT_NICE = 10
# B's measured window is this many figure durations (16 s by default): B's two appenders make
# about a hundred appends in 8 s, so one slow sample moved their p99 (B alone ranged 47-80 ms
# over six runs of one day); twice the samples halve what one outlier weighs.
WINDOW_FACTOR = 2
BOUND = 2.0  # DESIGN 5: B's p99 under A ÷ alone
B_PREFIX, HOT_PREFIX, REPORT_PREFIX = "noisy-b", "noisy-hot", "noisy-report"
HOURS = 8_000  # seeded rows spread over this many past hours (inside the report's year)
MODELS = 20


def seed_ledger_sql(tenant: str, copies: int) -> str:
    """`copies` copies of each consume row the service wrote on `tenant`'s report runs, spread
    over HOURS past hours and MODELS models (so a report by hour or model has many groups).
    The ledger's identity column takes the sequence's next values; `LATERAL`, so
    jsonb_populate_record runs once per row and not once per column."""
    return (
        "INSERT INTO budget.ledger OVERRIDING SYSTEM VALUE SELECT c.*"
        " FROM (SELECT to_jsonb(l) AS doc FROM budget.ledger l"
        f" WHERE l.tenant_id = '{tenant}' AND l.decision = 'consume'"
        f" AND l.run_id LIKE '{REPORT_PREFIX}-%') t"
        f" CROSS JOIN generate_series(1, {copies}) g,"
        " LATERAL jsonb_populate_record(NULL::budget.ledger, t.doc || jsonb_build_object("
        " 'entry_id', nextval(pg_get_serial_sequence('budget.ledger', 'entry_id')),"
        " 'request_id', 'noisy-seed-' || g || '-' || (t.doc ->> 'entry_id'),"
        f" 'model', 'model-' || (g % {MODELS}),"
        f" 'created_at', now() - make_interval(hours => g % {HOURS}))) c"
    )


CORE_PARTS = ("budget", "memory", "postgres", "machine")


def core_ticks(roots: dict[str, list[int]]) -> tuple[float, dict[str, int | None]]:
    """Now, and the CPU ticks used so far by each part's process trees and by the machine."""
    table = procstat.process_table()
    ticks = {part: procstat.measured_ticks(pids, table) for part, pids in roots.items()}
    ticks["machine"] = procstat.machine_busy()
    return time.monotonic(), ticks


def cores_used(
    before: tuple[float, Mapping[str, int | None]],
    after: tuple[float, Mapping[str, int | None]],
    hz: int,
) -> dict[str, float | None]:
    """Cores each part kept busy on average between two `core_ticks` (None: not measured)."""
    seconds = after[0] - before[0]
    out: dict[str, float | None] = {}
    for part in CORE_PARTS:
        a, b = before[1].get(part), after[1].get(part)
        if a is None or b is None or seconds <= 0:
            out[part] = None
        else:
            out[part] = round(max(0, b - a) / hz / seconds, 2)
    return out


def ratio(under: Any, alone: Any) -> float | None:
    """B under A ÷ B alone, or None when either is missing or alone is not positive."""
    ok = isinstance(under, int | float) and isinstance(alone, int | float)
    return round(under / alone, 2) if ok and alone > 0 else None


def _noise(figure: dict[str, Any]) -> dict[str, Any]:
    """What tenant A achieved: its rate, latency and errors (throttling included)."""
    keys = ("scenario", "concurrency", "status", "reason", "rpc_per_s", "p50_ms", "p99_ms")
    noise = {k: figure[k] for k in (*keys, "errors") if k in figure}
    if str(noise.get("reason", "")).startswith("no successful RPC"):
        noise["reason"] = "no call finished in its period"  # its errors say how they ended
    return noise


def met(pairs_ratio: float | None, appends: dict[str, Any]) -> bool:
    """Every ratio of B's within BOUND; B's appends that never finished under A are not."""
    ratios = [pairs_ratio]
    if appends.get("status") == "ok" or "under A" in str(appends.get("reason", "")):
        ratios.append(appends.get("ratio_p99"))
    return all(r is not None and r <= BOUND for r in ratios)


def figure(
    alone: list[dict[str, Any]], under: list[dict[str, Any]], noise: dict[str, Any]
) -> dict[str, Any]:
    """The noisy figure from B's [pairs, appends] alone and under A, and A's own figure."""
    for phase, (pairs, _) in (("alone", alone), ("under A", under)):
        if pairs.get("status") != "ok":
            reason = f"B {phase}: {pairs.get('status')}: {pairs.get('reason', '')}"
            return {"status": "failed", "reason": reason, "a": _noise(noise)}
    (pairs_alone, append_alone), (pairs_under, append_under) = alone, under
    appends: dict[str, Any] = {"callers": append_under.get("concurrency")}
    if append_alone.get("status") == "ok" and append_under.get("status") == "ok":
        appends.update(
            status="ok",
            alone_p99_ms=append_alone["p99_ms"],
            under_p99_ms=append_under["p99_ms"],
            ratio_p99=ratio(append_under["p99_ms"], append_alone["p99_ms"]),
        )
    else:
        why = [
            f"{phase}: {f.get('status')}: {f.get('reason', '')}"
            for phase, f in (("alone", append_alone), ("under A", append_under))
            if f.get("status") != "ok"
        ]
        appends.update(status="failed", reason="; ".join(why))
    pairs_ratio = ratio(pairs_under["p99_ms"], pairs_alone["p99_ms"])
    return {
        "status": "ok",
        "b_callers": pairs_under.get("concurrency"),
        "alone_p50_ms": pairs_alone["p50_ms"],
        "alone_p99_ms": pairs_alone["p99_ms"],
        "under_p50_ms": pairs_under["p50_ms"],
        "under_p99_ms": pairs_under["p99_ms"],
        "ratio_p99": pairs_ratio,
        "met": met(pairs_ratio, appends),
        "b_pairs_per_s": [pairs_alone.get("ops_per_s"), pairs_under.get("ops_per_s")],
        "b_errors": pairs_under.get("errors", {}),
        "b_appends": appends,
        "a": _noise(noise),
    }


async def _a_consumes(target: str, run_ids: list[str], pairs: int) -> None:
    """Reserve+Consume pairs as tenant A: the ledger rows the seeding copies."""
    metadata = auth({"tenant": tenants.NOISY})
    async with grpc.aio.insecure_channel(target) as channel:
        reserve = unary(channel, budget.SERVICE + "Reserve", pb.ReserveResponse)
        consume = unary(channel, budget.SERVICE + "Consume", pb.ConsumeResponse)
        for i in range(pairs):
            rid = run_ids[i % len(run_ids)]
            held = await reserve(
                pb.ReserveRequest(
                    request_id=uuid.uuid4().hex, run_id=rid, model=budget.MODEL,
                    estimate=budget.ESTIMATE, ttl_seconds=60,
                ),
                timeout=30, metadata=metadata,
            )  # fmt: skip
            await consume(
                pb.ConsumeRequest(
                    request_id=uuid.uuid4().hex, run_id=rid, model=budget.MODEL,
                    reservation_id=held.reservation.reservation_id, usage=budget.USAGE,
                ),
                timeout=30, metadata=metadata,
            )  # fmt: skip


class NoisyFlow:
    def __init__(self, runner: Runner, names: list[str], database: BenchDatabase) -> None:
        self.runner = runner
        self.config = runner.config
        self.names = names
        self.database = database
        self.window = self.config.duration * WINDOW_FACTOR

    def b_specs(self, budget_at: str, memory_at: str) -> list[LoadSpec]:
        """B's measured calls: pairs on its runs, and single small appends to its memories."""
        pairs = self.config.spec(
            "budget.pairs",
            budget_at,
            params={"runs": B_RUNS, "prefix": B_PREFIX, "tenant": tenants.MEASURED},
            processes=1,
            concurrency=B_CALLERS,
            duration=self.window,
            rpcs_per_op=2,
        )
        refs = [f"noisy/b-{i}" for i in range(B_MEMORIES)]
        appends = self.config.spec(
            "memory.append",
            memory_at,
            params={"memory_refs": refs, "start": 0, "tenant": tenants.MEASURED},
            processes=1,
            concurrency=B_APPEND_CALLERS,
            duration=self.window,
        )
        return [pairs, appends]

    def noise_spec(self, name: str, budget_at: str, memory_at: str) -> LoadSpec:
        """Tenant A's load for `name`, from LEAD before B's warm-up to the end of B's window:
        all of it measured (no warm-up of its own), no call outliving it."""
        a = {"tenant": tenants.NOISY}
        scenario, target, params, callers = {
            "noisy.reports": ("budget.report", budget_at, a, A_REPORT_CALLERS),
            "noisy.memory_writes": (
                "memory.append_big",
                memory_at,
                {**a, "entries": A_ENTRIES, "entry_bytes": A_ENTRY_BYTES},
                A_WRITERS,
            ),
            "noisy.hot_runs": (
                "budget.pairs",
                budget_at,
                {**a, "runs": A_HOT_RUNS, "prefix": HOT_PREFIX},
                A_HOT_CALLERS,
            ),
        }[name]
        period = LEAD + self.config.warmup + self.window
        return self.config.spec(
            scenario,
            target,
            params=params,
            concurrency=callers,
            warmup=0.0,
            duration=period,
            timeout=period,
            rpcs_per_op=2 if scenario == "budget.pairs" else 1,
            nice=A_CLIENT_NICE,
        )

    def seed_ledger(self, budget_at: str) -> None:
        """A's ledger grown to LEDGER_ROWS consume rows: pairs through the service, then SQL
        copies of the rows it wrote."""
        began = time.monotonic()
        runs = [budget.run_id(i, REPORT_PREFIX) for i in range(A_REPORT_RUNS)]
        asyncio.run(budget.open_runs(budget_at, runs, tenant=tenants.NOISY))
        asyncio.run(_a_consumes(budget_at, runs, A_REPORT_PAIRS))
        copies = math.ceil(LEDGER_ROWS / A_REPORT_PAIRS)
        count = (
            "SELECT count(*) FROM budget.ledger"
            f" WHERE tenant_id = '{tenants.NOISY}' AND decision = 'consume'"
        )
        sql = seed_ledger_sql(tenants.NOISY, copies)
        rows = asyncio.run(admin(self.database.url, sql, "ANALYZE budget.ledger", count))
        seconds = round(time.monotonic() - began, 2)
        self.runner.results.setup["noisy.reports.ledger"] = {
            "consume_rows": int(rows[0]),
            "seconds": seconds,
        }
        self.config.log(f"{'seed A ledger':<30} {int(rows[0]):,} consume rows in {seconds:.1f} s")

    def run(self) -> None:
        with (
            self.runner.service("budget", self.database, tokens=True) as budget_server,
            self.runner.service("memory", self.database, tokens=True) as memory_server,
        ):
            budget_at, memory_at = budget_server.address, memory_server.address
            asyncio.run(
                budget.open_runs(
                    budget_at, [budget.run_id(i, B_PREFIX) for i in range(B_RUNS)],
                    tenant=tenants.MEASURED,
                )
            )  # fmt: skip
            if "noisy.hot_runs" in self.names:
                hot = [budget.run_id(i, HOT_PREFIX) for i in range(A_HOT_RUNS)]
                asyncio.run(budget.open_runs(budget_at, hot, tenant=tenants.NOISY))
            if "noisy.reports" in self.names:
                self.seed_ledger(budget_at)
            b = self.b_specs(budget_at, memory_at)
            roots = {
                "budget": [budget_server.popen.pid],
                "memory": [memory_server.popen.pid],
                "postgres": [self.runner.postmaster] if self.runner.postmaster else [],
            }
            hz = procstat.clock_ticks()
            for name in self.names:
                start = core_ticks(roots)
                alone = [r.figure() for r in run_together([(spec, 0.0) for spec in b])]
                middle = core_ticks(roots)
                noise = self.noise_spec(name, budget_at, memory_at)
                results = run_together([(noise, 0.0), *((spec, LEAD) for spec in b)])
                end = core_ticks(roots)
                under = [r.figure() for r in results[1:]]
                result = figure(alone, under, results[0].figure())
                result["cores"] = {
                    "alone": cores_used(start, middle, hz),
                    "under": cores_used(middle, end, hz),
                }
                self.runner.record(self.runner.results.noisy, name, result)


def line(name: str, figure: dict[str, Any]) -> str:
    """The console line of a noisy figure: B alone and under A, the ratio, what A achieved."""
    a = figure.get("a", {})
    if a.get("status") == "ok":
        errors = ", ".join(f"{k} ×{v}" for k, v in (a.get("errors") or {}).items()) or "no errors"
        noise = f"A {a['rpc_per_s']:,.0f} RPC/s ({errors})"
    else:
        errors = ", ".join(f"{k} ×{v}" for k, v in (a.get("errors") or {}).items()) or "none"
        noise = f"A {a.get('status')}: {str(a.get('reason', ''))[:200]} (errors {errors})"
    if figure.get("status") != "ok":
        return f"{name:<30} {figure.get('status')}: {figure.get('reason', '')}; {noise}"
    appends = figure.get("b_appends", {})
    if appends.get("status") == "ok":
        mine = f"B appends p99 x{appends['ratio_p99']}"
    else:
        mine = f"B appends {appends.get('status')}: {str(appends.get('reason', ''))[:120]}"
    busy = {phase: (figure.get("cores") or {}).get(phase) or {} for phase in ("alone", "under")}
    cores = f"; machine cores {busy['alone'].get('machine')} → {busy['under'].get('machine')}"
    return (
        f"{name:<30} B p50/p99 alone {figure['alone_p50_ms']:.1f}/{figure['alone_p99_ms']:.1f} ms,"
        f" under A {figure['under_p50_ms']:.1f}/{figure['under_p99_ms']:.1f} ms:"
        f" x{figure['ratio_p99']}; {mine}; ≤ {BOUND:g}: {'yes' if figure['met'] else 'no'}; {noise}"
        f"{cores if figure.get('cores') else ''}"
    )
