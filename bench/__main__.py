"""`python -m bench`: measure both services beside same-run ceilings and write the report."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import report
from bench.runner import FIGURES, Config, Runner

HERE = Path(__file__).resolve().parent


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse(argv: Sequence[str] | None) -> tuple[Config, Path]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: ~1.5 s per figure")
    parser.add_argument("--duration", type=float, help="measured seconds per figure (default 8)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each figure")
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("BENCH_WORKERS", "2")),
        help="server processes per service and for echo (RATION_WORKERS; default 2)",
    )
    parser.add_argument("--processes", type=int, default=2, help="load processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=64, help="callers in flight (64)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="measure only figures starting with NAME (repeatable, comma-separated): "
        + ", ".join(FIGURES),
    )
    parser.add_argument("--sizes", default="200,1000,5000", help="memory sizes (entries)")
    parser.add_argument("--runs", type=int, default=1_000, help="runs for the spread figures")
    parser.add_argument(
        "--shared-server",
        action="store_true",
        help="use the local server on 127.0.0.1:5432 instead of a throwaway cluster of the "
        "bench's own (its Postgres CPU then counts every client of that server)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="report directory (default bench/ for a full run, bench/results/partial otherwise)",
    )
    args = parser.parse_args(argv)
    only = tuple(name for value in args.only for name in _csv(value))
    unknown = [n for n in only if not any(f.startswith(n) for f in FIGURES)]
    if unknown:
        parser.error(f"--only {', '.join(unknown)}: expected a prefix of {', '.join(FIGURES)}")
    sizes = tuple(sorted({int(s) for s in _csv(args.sizes)}))
    if not sizes or min(sizes) < 2:
        parser.error("--sizes: at least one size of 2 or more entries")
    if args.workers < 1 or args.processes < 1 or args.concurrency < 1:
        parser.error("--workers, --processes and --concurrency must be at least 1")
    duration = args.duration or (1.5 if args.quick else 8.0)
    warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 1.0)
    custom = args.quick or only or args.duration or sizes != (200, 1_000, 5_000)
    mode = "quick" if args.quick else ("partial" if custom else "full")
    config = Config(
        duration=duration,
        warmup=warmup,
        workers=args.workers,
        processes=args.processes,
        concurrency=args.concurrency,
        sizes=sizes,
        only=only,
        runs=args.runs,
        mode=mode,
        shared_server=args.shared_server,
    )
    out = args.out or (HERE if mode == "full" else HERE / "results" / "partial")
    return config, out


def main(argv: Sequence[str] | None = None) -> int:
    config, out = parse(argv)
    print(
        f"bench: {config.mode}, {config.workers} server workers, {config.processes} load "
        f"processes x {config.concurrency} callers, {config.duration} s per figure",
        flush=True,
    )
    results = dataclasses.asdict(Runner(config).run())
    paths = report.write(results, out)
    for row in results["targets"]:
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else "—"
        print(f"target {row['status']:<13} {ratio:>6} {row['bound']:<6} {row['target']}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    failed = [n for n, f in results["figures"].items() if f.get("status") == "failed"]
    failed += [n for n, f in results["ceilings"].items() if f.get("status") == "failed"]
    failed += [n for n, f in results["noisy"].items() if f.get("status") == "failed"]
    if results["sizing"].get("status") == "failed":
        failed.append("sizing")
    if failed:
        print(f"failed: {', '.join(failed)} (server logs: {results['setup'].get('server_logs')})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
