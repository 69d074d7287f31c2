"""One bench run: Postgres, ceilings (pgbench, echo), then each service started as users do."""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine, noisy_flow, noisy_notify, pgbench, procstat, sizing, tenants
from bench.budget import FEW_CALLERS
from bench.budget_flow import BudgetFlow
from bench.database import (
    BenchDatabase,
    Server,
    bench_database,
    max_connections,
    postgres_server,
    postmaster_facts,
    server_version,
)
from bench.load import LoadSpec, run_load
from bench.memory_flow import MemoryFlow
from bench.meter import BATCH_METRIC, Meter, cpu_per_rpc, mean_batch_size, shown
from bench.servers import ServerProcess, serve_database, start_echo

# Names accepted by --only (a prefix selects a group, e.g. "budget" or "memory.list").
FIGURES = (
    "sizing",
    "pgbench.hot",
    "pgbench.spread",
    "pgbench.one",
    "echo",
    f"echo_{FEW_CALLERS}",
    "echo_1",
    "budget.pairs_spread",
    f"budget.pairs_spread_{FEW_CALLERS}",
    "budget.pairs_hot",
    "budget.check",
    "budget.pairs_1",
    "budget.check_1",
    "budget.pairs_big_tenant",
    "budget.pairs_hot_big",
    "memory.append",
    "memory.append_fresh",
    "memory.list_recency",
    "memory.list_relevance",
    *noisy_flow.NOISES,
    "noisy.notify",
)


@dataclass(frozen=True)
class Config:
    duration: float = 8.0
    warmup: float = 1.0
    workers: int = 2
    processes: int = 2
    concurrency: int = 64
    sizes: tuple[int, ...] = (200, 1_000, 5_000)
    only: tuple[str, ...] = ()
    batch: int = 100
    runs: int = 1_000
    append_samples: int = 250
    mode: str = "full"
    shared_server: bool = False
    log: Callable[[str], None] = print

    def selected(self, name: str) -> bool:
        return not self.only or any(name.startswith(prefix) for prefix in self.only)

    def spec(self, scenario: str, target: str, **kw: Any) -> LoadSpec:
        base = LoadSpec(
            scenario,
            target,
            processes=self.processes,
            concurrency=self.concurrency,
            duration=self.duration,
            warmup=self.warmup,
        )
        return replace(base, **kw)

    def append_plan(self, size: int) -> tuple[int, int]:
        """(window, copies): each of `copies` memories starts at size - window and grows by at
        most `window` appends (max(50, size/20), at most half the size); enough copies that
        about `append_samples` appends are measured at every size."""
        window = min(size // 2, max(50, size // 20))
        return window, max(1, -(-self.append_samples // window))


@dataclass
class Results:
    config: dict[str, Any]
    machine: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Worst-case entry sizing (no server): bench/sizing.py.
    sizing: dict[str, Any] = field(default_factory=dict)
    # Tenant B alone and while tenant A is noisy, B-under-A ÷ B-alone (DESIGN 5: at most 2).
    noisy: dict[str, dict[str, Any]] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    elapsed_s: float = 0.0


def _line(name: str, figure: dict[str, Any]) -> str:
    if name.startswith("noisy."):
        return noisy_flow.line(name, figure)
    if figure.get("status") != "ok":
        return f"{name:<30} {figure.get('status')}: {figure.get('reason', '')}"
    if "tps" in figure:
        rate = f"{figure['tps']:>9,.0f} tps  "
    else:
        rate = f"{figure['rpc_per_s']:>9,.0f} RPC/s"
    line = f"{name:<30} {rate}  p50 {figure['p50_ms']:8.2f} ms  p99 {figure['p99_ms']:8.2f} ms"
    if "cpu_rpcs" in figure:
        line += (
            f"  CPU ms/RPC server {shown(figure.get('server_ms_per_rpc'))}"
            f" postgres {shown(figure.get('postgres_ms_per_rpc'))}"
            f" load {shown(figure.get('load_ms_per_rpc'))}"
            f" other {shown(figure.get('other_ms_per_rpc'))}"
        )
    if "mean_batch_size" in figure:
        line += f"  batch {shown(figure['mean_batch_size'])}"
    return line


class Runner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.log_dir = Path(tempfile.mkdtemp(prefix="ration-bench-logs-"))
        self.results = Results(config={k: v for k, v in config.__dict__.items() if k != "log"})
        self.postmaster: int | None = None

    def record(self, section: dict[str, dict[str, Any]], name: str, figure: dict[str, Any]) -> None:
        section[name] = figure
        self.config.log(_line(name, figure))

    def skip(self, names: list[str], status: str, reason: str) -> None:
        """Records `status: reason` for each figure not measured yet."""
        for name in names:
            if name not in self.results.figures:
                self.record(self.results.figures, name, {"status": status, "reason": reason})

    def run(self) -> Results:
        started = time.monotonic()
        self.results.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            self._sizing()
            with (
                postgres_server(self.config.shared_server) as server,
                bench_database(server) as database,
            ):
                url = database.url
                self._find_postmaster(url)
                self.results.machine = machine.describe(server_version(url), server.source)
                self.results.machine.update(
                    server_workers=self.config.workers,
                    load_processes=self.config.processes,
                    concurrency=self.config.concurrency,
                )
                pgb = [f"pgbench.{n}" for n in ("hot", "spread", "one")]
                pgb = [n for n in pgb if self.config.selected(n)]
                self._guarded(self.results.ceilings, pgb, lambda: self._pgbench(server, url))
                echo = [n for n in ("echo", f"echo_{FEW_CALLERS}", "echo_1")]
                echo = [n for n in echo if self.config.selected(n)]
                self._guarded(self.results.ceilings, echo, self._echo)
                self._guarded(
                    self.results.figures, self._budget_names(), lambda: self._budget(database)
                )
                self._guarded(
                    self.results.figures, self._memory_names(), lambda: self._memory(database)
                )
                noisy = [n for n in noisy_flow.NOISES if self.config.selected(n)]
                if noisy:
                    flow = noisy_flow.NoisyFlow(self, noisy, database)
                    self._guarded(self.results.noisy, noisy, flow.run)
                noisy = ["noisy.notify"] if self.config.selected("noisy.notify") else []
                self._guarded(self.results.noisy, noisy, lambda: self._noisy_notify(database))
                self._floors()
        finally:
            self.results.elapsed_s = round(time.monotonic() - started, 1)
            self.results.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        failed = any(f.get("status") == "failed" for f in self._all())
        if not failed:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        else:
            self.results.setup["server_logs"] = str(self.log_dir)
        return self.results

    def _floors(self) -> None:
        """The floor of a one-caller Reserve+Consume pair: two round trips (echo at one caller)
        and two commits (pgbench at one client), both measured in this run."""
        echo = self.results.ceilings.get("echo_1", {})
        commit = self.results.ceilings.get("pgbench.one", {})
        if echo.get("status") != "ok" or commit.get("status") != "ok":
            return
        p50 = 2 * float(echo["p50_ms"]) + 2 * float(commit["p50_ms"])
        self.results.ceilings["floor.pair_1"] = {
            "status": "ok",
            "scenario": "2 × echo_1 p50 + 2 × pgbench.one p50",
            "p50_ms": round(p50, 3),
        }

    def _all(self) -> Iterator[dict[str, Any]]:
        yield from self.results.ceilings.values()
        yield from self.results.figures.values()
        yield from self.results.noisy.values()
        if self.results.sizing:
            yield self.results.sizing

    def _sizing(self) -> None:
        """Measured first, in this process, before any server competes for the CPUs."""
        if not self.config.selected("sizing"):
            return
        try:
            figure = sizing.measure()
        except Exception as exc:
            figure = {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[-600:]}"}
        self.results.sizing = figure
        if figure["status"] != "ok":
            self.config.log(f"{'sizing':<30} failed: {figure['reason']}")
            return
        self.config.log(
            f"{'sizing (64 KiB, worst case)':<30} {figure['worst']}: {figure['worst_ms']:.1f} ms"
            f", tiktoken {figure['worst_tiktoken_ms']:.1f} ms"
        )

    def _find_postmaster(self, url: str) -> None:
        """Postgres CPU is the whole cluster's: the postmaster's process tree, found through the
        checkpointer the server reports; not measurable when Postgres runs elsewhere."""
        try:
            checkpointer, started = postmaster_facts(url)
            self.postmaster, why = procstat.postmaster(checkpointer, started)
        except Exception as exc:  # CPU per RPC of Postgres is then n/a; the run goes on
            self.postmaster, why = None, f"{type(exc).__name__}: {str(exc)[-200:]}"
        self.results.setup["cpu"] = {
            "clock_ticks_per_s": procstat.clock_ticks(),
            "postmaster_pid": self.postmaster,
            **({"postgres_not_measured": why} if why else {}),
        }
        if why:
            self.config.log(f"{'postgres CPU':<30} not measured: {why}")

    def _pgbench(self, server: Server, url: str) -> None:
        names = [n for n in ("hot", "spread", "one") if self.config.selected(f"pgbench.{n}")]
        if not names:
            return
        binary = pgbench.pgbench_binary(server)
        if binary is None:
            missing = {"status": "not available", "reason": "no pgbench binary"}
            for name in names:
                self.record(self.results.ceilings, f"pgbench.{name}", missing)
            return
        asyncio.run(pgbench.prepare(url))
        clients = max(1, min(self.config.concurrency, max_connections(url) - 10))
        for name in names:
            # `one`: a single client's commit latency, the floor of a one-caller call.
            n = 1 if name == "one" else clients
            figure = pgbench.run(binary, url, name, n, self.config.duration)
            self.record(self.results.ceilings, f"pgbench.{name}", figure)

    def _guarded(
        self, section: dict[str, dict[str, Any]], names: list[str], work: Callable[[], None]
    ) -> None:
        """A group that cannot start (e.g. a server that never becomes ready) fails its figures
        and the run goes on with the next group."""
        try:
            work()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {str(exc)[-600:]}"
            for name in names:
                if name not in section:
                    self.record(section, name, {"status": "failed", "reason": reason})

    def _budget_names(self) -> list[str]:
        return [n for n in FIGURES if n.startswith("budget.") and self.config.selected(n)]

    def _memory_names(self) -> list[str]:
        kinds = [n for n in FIGURES if n.startswith("memory.") and self.config.selected(n)]
        return [f"{k}.{s}" for k in kinds for s in self.config.sizes]

    def _echo(self) -> None:
        """The echo ceiling at the usual callers in flight and at FEW_CALLERS (for the
        Reserve+Consume figure at that many), on one echo server."""
        plan = {"echo": self.config.concurrency, f"echo_{FEW_CALLERS}": FEW_CALLERS, "echo_1": 1}
        names = [name for name in plan if self.config.selected(name)]
        if not names:
            return
        with start_echo(self.config.workers, self.log_dir) as server:
            server.wait_ready()
            for name in names:
                spec = self.config.spec("echo", server.address, concurrency=plan[name])
                figure = self.load(spec, server)
                self.record(
                    self.results.ceilings, name, {**figure, "server_workers": server.workers}
                )

    def load(
        self, spec: LoadSpec, server: ServerProcess | None = None, batches: bool = False
    ) -> dict[str, Any]:
        """Runs one measurement and what it cost: CPU per RPC of the server's processes, the
        Postgres cluster and the load processes over the measured window; with a service, also
        how its workers shared the RPCs, and with `batches` the mean batch size in that window
        (from the budget service's /metrics)."""
        scrape = None
        if server is not None and batches:
            names = [f"{BATCH_METRIC}_sum", f"{BATCH_METRIC}_count"]
            scrape = functools.partial(server.metric_totals, names)
        meter = Meter(
            server=[server.popen.pid] if server else [], postgres=self.postmaster, scrape=scrape
        )
        before = server.handled() if server else None
        try:
            result = run_load(spec, meter)
        except Exception as exc:  # a crashed load process fails this figure, not the run
            reason = f"{type(exc).__name__}: {str(exc)[-500:]}"
            return {"scenario": spec.scenario, "status": "failed", "reason": reason}
        figure = result.figure()
        if figure.get("status") == "ok" and result.marks is not None:
            first, last = result.marks
            figure.update(cpu_per_rpc(first, last, result.rpcs_per_s, meter.hz))
            if batches:
                figure["mean_batch_size"] = mean_batch_size(first.metrics, last.metrics)
        after = server.handled() if server else None
        if before and after and sum(after) > sum(before):
            done = [b - a for a, b in zip(before, after, strict=True)]
            figure["worker_share"] = [round(d / sum(done), 3) for d in done]
        return figure

    def service(
        self,
        name: str,
        database: BenchDatabase,
        workers: int | None = None,
        tokens: bool = False,
    ) -> ServerProcess:
        """The service as deployed: connected as the application role, migrating as the owner;
        with `tokens`, a writer token for each of two tenants (bench/tenants.py)."""
        env = {}
        if tokens:
            env["RATION_TOKEN_FILE"] = str(tenants.token_file(self.log_dir / "tokens.json"))
        workers = self.config.workers if workers is None else workers
        return serve_database(name, workers, database, self.log_dir, env)

    def _budget(self, database: BenchDatabase) -> None:
        names = self._budget_names()
        if names:
            with self.service("budget", database) as server:
                BudgetFlow(self, server, names, database.url).run()

    def _noisy_notify(self, database: BenchDatabase) -> None:
        """bench/noisy_notify.py: a budget service with two tenants' tokens, `ration notify`."""
        if not self.config.selected("noisy.notify"):
            return
        with self.service("budget", database, workers=1, tokens=True) as server:
            rounds = 10 if self.config.mode == "quick" else 30
            app = {"RATION_DATABASE_URL": database.app_url}
            figure = noisy_notify.measure(server.address, app, rounds, self.log_dir)
        self.results.noisy["noisy.notify"] = figure
        self.config.log(
            f"{'noisy.notify':<30} B alone p99 {figure['alone_p99_ms']:8.2f} ms, while A's"
            f" receivers drip p99 {figure['under_p99_ms']:8.2f} ms: x{figure['ratio_p99']}"
            f"  (SIGTERM exit {figure['sigterm_exit_s']} s)"
        )

    def _memory(self, database: BenchDatabase) -> None:
        kinds = [n for n in FIGURES if n.startswith("memory.") and self.config.selected(n)]
        if kinds:
            with self.service("memory", database) as server:
                MemoryFlow(self, server, kinds, database.url).run()
