"""The budget measurements: open the runs, then pairs spread and hot, then Check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from bench import budget
from bench.caller import describe, unavailable
from bench.database import admin, no_autovacuum
from bench.servers import ServerProcess

if TYPE_CHECKING:
    from bench.runner import Runner


# The tenant-size figures (DESIGN 10): the bench's tenant grown to BIG_RUNS runs holding
# BIG_HOLDS holds (one in HOLDS_PER_RUN open), and the hot run to HOT_HOLDS settled holds,
# copied in SQL from rows the service wrote (so every column is as the engine writes it).
BIG_RUNS, HOLDS_PER_RUN, HOT_HOLDS = 100_000, 10, 100_000
BIG_HOLDS = BIG_RUNS * HOLDS_PER_RUN


def grow_tenant_sql(runs_per_bench_run: int) -> tuple[str, ...]:
    """Copies of the bench runs (`runs_per_bench_run` each) with HOLDS_PER_RUN holds each, the
    last one open for a day (the runs' held columns are not raised: nothing touches them).
    `LATERAL`, so jsonb_populate_record runs once per row and not once per column."""
    return (
        "INSERT INTO budget.runs SELECT c.* FROM budget.runs r"
        f" CROSS JOIN generate_series(1, {runs_per_bench_run}) g,"
        " LATERAL jsonb_populate_record(NULL::budget.runs, to_jsonb(r)"
        " || jsonb_build_object('run_id', 'bench-big-' || g || '-' || r.run_id)) c"
        " WHERE r.run_id LIKE 'bench-run-%'",
        "INSERT INTO budget.holds SELECT c.*"
        " FROM (SELECT to_jsonb(h) AS doc FROM budget.holds h WHERE state = 'consumed' LIMIT 1) t"
        " CROSS JOIN (SELECT run_id FROM budget.runs WHERE run_id LIKE 'bench-big-%') b"
        f" CROSS JOIN generate_series(1, {HOLDS_PER_RUN}) k,"
        " LATERAL jsonb_populate_record(NULL::budget.holds, t.doc || jsonb_build_object("
        " 'run_id', b.run_id, 'reservation_id', 'big-' || b.run_id || '-' || k,"
        f" 'state', CASE WHEN k = {HOLDS_PER_RUN} THEN 'open' ELSE 'consumed' END,"
        f" 'ended_at', CASE WHEN k = {HOLDS_PER_RUN} THEN NULL ELSE t.doc -> 'ended_at' END,"
        " 'expires_at', now() + interval '1 day')) c",
    )


def grow_hot_run_sql() -> tuple[str, ...]:
    """HOT_HOLDS settled holds on the hot run: what it would hold after that many pairs."""
    return (
        "INSERT INTO budget.holds SELECT c.*"
        " FROM (SELECT to_jsonb(h) AS doc FROM budget.holds h WHERE state = 'consumed'"
        f" AND run_id = '{budget.HOT_RUN}' LIMIT 1) t"
        f" CROSS JOIN generate_series(1, {HOT_HOLDS}) k,"
        " LATERAL jsonb_populate_record(NULL::budget.holds,"
        " t.doc || jsonb_build_object('reservation_id', 'big-hot-' || k)) c",
    )


class BudgetFlow:
    def __init__(
        self, runner: Runner, server: ServerProcess, names: Sequence[str], url: str
    ) -> None:
        self.runner = runner
        self.config = runner.config
        self.server = server
        self.names = list(names)
        self.url = url  # the superuser's: the seeding bypasses row-level security

    def plans(self) -> dict[str, tuple[str, dict[str, Any], int]]:
        """Figure name -> (scenario, params, callers in flight)."""
        runs, callers = self.config.runs, self.config.concurrency
        return {
            "budget.pairs_spread": ("budget.pairs", {"runs": runs}, callers),
            f"budget.pairs_spread_{budget.FEW_CALLERS}": (
                "budget.pairs",
                {"runs": runs},
                budget.FEW_CALLERS,
            ),
            "budget.pairs_hot": ("budget.pairs", {"hot": True}, callers),
            "budget.check": ("budget.check", {"runs": runs}, callers),
            "budget.pairs_1": ("budget.pairs", {"runs": runs}, 1),
            "budget.check_1": ("budget.check", {"runs": runs}, 1),
            "budget.pairs_big_tenant": ("budget.pairs", {"runs": runs}, callers),
            "budget.pairs_hot_big": ("budget.pairs", {"hot": True}, callers),
        }

    def grow(self, name: str) -> None:
        """Before the tenant-size figures: the tenant (or the hot run) grown in SQL."""
        began = time.monotonic()
        if name == "budget.pairs_big_tenant":
            statements = grow_tenant_sql(max(1, BIG_RUNS // self.config.runs))
        elif name == "budget.pairs_hot_big":
            statements = grow_hot_run_sql()
        else:
            return
        # The holds are copies of one the service settled in an earlier figure of this run.
        settled = "SELECT count(*) FROM budget.holds WHERE state = 'consumed'"
        if asyncio.run(admin(self.url, settled)) == ["0"]:
            raise RuntimeError(f"{name} copies settled holds: measure budget.pairs first")
        asyncio.run(admin(self.url, *statements, "CHECKPOINT"))
        seconds = round(time.monotonic() - began, 2)
        self.runner.results.setup[f"{name}.grow_seconds"] = seconds
        self.config.log(f"{'grow for ' + name:<30} {seconds:.1f} s (never analyzed)")

    def run(self) -> None:
        runs = [budget.run_id(i) for i in range(self.config.runs)] + [budget.HOT_RUN]
        # Never analyzed during a bench run: a fresh deployment, or a server with autovacuum
        # off, plans without statistics, and the engine's cost must not depend on them.
        asyncio.run(admin(self.url, no_autovacuum("budget")))
        began = time.monotonic()
        try:
            asyncio.run(budget.open_runs(self.server.address, runs))
        except grpc.aio.AioRpcError as error:
            reason = unavailable(error)
            status = "not available" if reason else "failed"
            self.runner.skip(self.names, status, f"OpenRun: {reason or describe(error)}")
            return
        seconds = round(time.monotonic() - began, 2)
        self.runner.results.setup["budget.open_runs"] = {"runs": len(runs), "seconds": seconds}
        plans = self.plans()
        for name in self.names:
            scenario, params, callers = plans[name]
            self.grow(name)
            pairs = scenario == "budget.pairs"
            spec = self.config.spec(
                scenario,
                self.server.address,
                params=params,
                concurrency=callers,
                rpcs_per_op=2 if pairs else 1,
            )
            figure = self.runner.load(spec, self.server, batches=True)
            if pairs and figure.get("status") == "ok":
                figure["pairs_per_s"] = figure.pop("ops_per_s")
                figure["runs"] = 1 if params.get("hot") else self.config.runs
            figure["server_workers"] = self.server.workers
            self.runner.record(self.runner.results.figures, name, figure)
