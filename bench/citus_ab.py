"""`python -m bench.citus_ab`: the budget service on Citus beside the same on one PostgreSQL.

Issue 28's figures: Check latency at one caller, and Reserve+Consume pairs/s at several callers,
on a Citus cluster ÷ on plain PostgreSQL, on the same cores, interleaved (A B B A A B …) so that
both sides see the same background load, over several rounds; the medians decide.

    .venv/bin/python -m bench.citus_ab --citus postgresql://postgres@127.0.0.1:9700/postgres

`--citus` is a superuser URL of a Citus coordinator database with its workers added (as
RATION_TEST_CITUS_URL for tests/system/test_citus.py): a fresh database is made on every node
with the README's roles (tests/support/citus.py), migrated with `ration migrate --distribute`,
and dropped at the end. The PostgreSQL side is the bench's own throwaway cluster
(bench/database.py), or BENCH_DATABASE_URL. Each side runs one `ration budget serve` (as the
application role) for the whole run; only one side is measured at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import budget
from bench.database import BenchDatabase, bench_database, postgres_server
from bench.load import LoadSpec, run_load
from bench.servers import ServerProcess, serve_database

CHECK_TARGET = 3.0  # Check p50 on Citus ÷ on PostgreSQL, at most (issue 28)
PAIRS_TARGET = 0.7  # pairs/s on Citus ÷ on PostgreSQL, at least


@dataclass
class Side:
    name: str
    server: ServerProcess
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.samples[key])


@contextlib.contextmanager
def citus_database(url: str) -> Iterator[BenchDatabase]:
    """A fresh database on every node of the cluster `url` names, migrated and distributed."""
    from tests.support import citus  # the tests' Citus setup: deploy/README's steps 1 and 2

    os.environ[citus.URL_VARIABLE] = url
    reason = citus.skip_reason()
    if reason is not None:
        raise SystemExit(f"--citus: {reason}")
    database = asyncio.run(citus.create())
    try:
        ration = Path(sys.executable).parent / "ration"
        env = {**os.environ, "RATION_DATABASE_URL": database.owner_url}
        done = subprocess.run(
            [str(ration), "migrate", "--distribute"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise SystemExit(f"ration migrate --distribute failed:\n{done.stderr[-3000:]}")
        yield BenchDatabase(database.admin_url, database.owner_url, database.app_url)
    finally:
        asyncio.run(citus.drop(database))


def measure(side: Side, args: argparse.Namespace) -> None:
    target = side.server.address
    params = {"runs": args.runs}
    check = run_load(
        LoadSpec(
            "budget.check",
            target,
            params=params,
            processes=1,
            concurrency=1,
            duration=args.duration,
            warmup=args.warmup,
        )
    ).figure()
    pairs = run_load(
        LoadSpec(
            "budget.pairs",
            target,
            params=params,
            processes=args.processes,
            concurrency=args.callers,
            duration=args.duration,
            warmup=args.warmup,
            rpcs_per_op=2,
        )
    ).figure()
    for figure in (check, pairs):
        if figure.get("status") != "ok":
            raise SystemExit(f"{side.name}: {figure.get('scenario')}: {figure.get('reason')}")
    side.add("check_p50_ms", check["p50_ms"])
    side.add("check_p99_ms", check["p99_ms"])
    side.add("pairs_per_s", pairs["ops_per_s"])
    print(
        f"{side.name:<8} Check (1 caller) p50 {check['p50_ms']:.2f} ms p99 {check['p99_ms']:.2f}"
        f" ms; pairs ({args.callers} callers) {pairs['ops_per_s']:.0f}/s",
        flush=True,
    )


def order(rounds: int) -> list[tuple[int, int]]:
    """(round, side index) in A B B A A B … order."""
    steps: list[tuple[int, int]] = []
    for r in range(rounds):
        pair = (0, 1) if r % 2 == 0 else (1, 0)
        steps.extend((r, s) for s in pair)
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.citus_ab", description=__doc__)
    parser.add_argument("--citus", required=True, help="superuser URL of a Citus coordinator")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=6.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--callers", type=int, default=16, help="pairs: callers in flight")
    parser.add_argument("--processes", type=int, default=2, help="pairs: load processes")
    parser.add_argument("--runs", type=int, default=200, help="runs the calls spread over")
    parser.add_argument("--workers", type=int, default=1, help="RATION_WORKERS of each side")
    parser.add_argument("--out", type=Path, help="write the samples and medians as JSON here")
    args = parser.parse_args(argv)
    run_ids = [budget.run_id(i) for i in range(args.runs)]
    with (
        tempfile.TemporaryDirectory(prefix="ration-citus-ab-") as logs,
        postgres_server() as pg,
        bench_database(pg) as plain,
        citus_database(args.citus) as distributed,
        serve_database("budget", args.workers, plain, Path(logs) / "postgres", {}) as a,
        serve_database("budget", args.workers, distributed, Path(logs) / "citus", {}) as b,
    ):
        sides = [Side("postgres", a), Side("citus", b)]
        for side in sides:
            asyncio.run(budget.open_runs(side.server.address, run_ids))
        began = time.monotonic()
        for round_no, index in order(args.rounds):
            print(f"round {round_no + 1}:", end=" ", flush=True)
            measure(sides[index], args)
        pg_side, citus_side = sides
        check = citus_side.median("check_p50_ms") / pg_side.median("check_p50_ms")
        pairs = citus_side.median("pairs_per_s") / pg_side.median("pairs_per_s")
        result: dict[str, Any] = {
            "rounds": args.rounds,
            "seconds": round(time.monotonic() - began, 1),
            "samples": {s.name: s.samples for s in sides},
            "check_p50_ratio": round(check, 2),
            "pairs_ratio": round(pairs, 2),
        }
        verdict = "met" if check <= CHECK_TARGET else "not met"
        print(
            f"Check p50 citus ÷ postgres: {check:.2f} (≤ {CHECK_TARGET:g}: {verdict}); "
            f"medians {citus_side.median('check_p50_ms'):.2f} ÷ "
            f"{pg_side.median('check_p50_ms'):.2f} ms"
        )
        verdict = "met" if pairs >= PAIRS_TARGET else "not met"
        print(
            f"pairs/s citus ÷ postgres: {pairs:.2f} (≥ {PAIRS_TARGET:g}: {verdict}); "
            f"medians {citus_side.median('pairs_per_s'):.0f} ÷ {pg_side.median('pairs_per_s'):.0f}"
        )
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
