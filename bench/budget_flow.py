"""The budget measurements: open the runs, then pairs spread and hot, then Check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from bench import budget
from bench.caller import describe, unavailable
from bench.servers import ServerProcess

if TYPE_CHECKING:
    from bench.runner import Runner


class BudgetFlow:
    def __init__(self, runner: Runner, server: ServerProcess, names: Sequence[str]) -> None:
        self.runner = runner
        self.config = runner.config
        self.server = server
        self.names = list(names)

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
        }

    def run(self) -> None:
        runs = [budget.run_id(i) for i in range(self.config.runs)] + [budget.HOT_RUN]
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
