"""`python -m bench.profile_server`: the budget server process's own CPU per RPC.

Starts the budget server as the tests do (`ration_server.registry.build_runner`, connected as an
application role, migrated as an owner) in a child process per source tree given with `--root`
(default: this checkout), against a throwaway database on the local Postgres (bench/database.py:
fresh owner and application roles, `ration_bench_<hex>`, all dropped at the end). The parent then
drives, per round and per server in turn, N Reserve+Consume pairs and N Checks from a few
concurrent callers, and reads the server's utime+stime from /proc/<pid>/stat around each phase:
what the server (gRPC, asyncio, asyncpg and our code, all threads) spends per RPC, without
Postgres or the load generator. Servers of different roots take turns in every round, so a
before/after comparison on a busy machine sees the same background load; the medians over
rounds are printed at the end.

    .venv/bin/python -m bench.profile_server --root /tmp/before --root . --rounds 3

`--cprofile DIR` writes each server's cProfile stats (event-loop thread) to DIR/<n>.pstats at
the end; profiling inflates the CPU figures, so use it to find where time goes, not to measure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.budget import SERVICE
from bench.caller import unary
from bench.database import BenchDatabase, bench_database, postgres_server

ROOT = Path(__file__).resolve().parent.parent
PORT_LINE = "profile-server-port "
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODEL = "gpt-4o-mini"


def _service_env(database_url: str, migrate_url: str, token_file: str | None) -> dict[str, str]:
    """What tests/support/servers.py's service_env sets, with the owner migrating on start."""
    values = {
        "RATION_DATABASE_URL": database_url,
        "RATION_MIGRATE_DATABASE_URL": migrate_url,
        "RATION_BUDGET_LISTEN": "127.0.0.1:0",
        "RATION_BUDGET_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_DB_POOL_MIN": "1",
        "RATION_HEALTH_PROBE_MS": "1000",
        "RATION_SHUTDOWN_GRACE_MS": "200",
        "RATION_LOG_FORMAT": "json",
    }
    if token_file is not None:
        values["RATION_TOKEN_FILE"] = token_file
    return values


# --- the server child -------------------------------------------------------------------------


async def _serve(database_url: str, env: dict[str, str]) -> None:
    from ration_server import registry
    from servicekit.settings import Env

    runner = registry.build_runner("budget", Env(env), database_url)
    await runner.start()
    await asyncio.wait_for(runner.ready.wait(), timeout=120)
    sys.stdout.write(f"{PORT_LINE}{runner.port}\n")
    sys.stdout.flush()
    # Serve until the parent closes our stdin.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.stop()


def serve_child(cprofile: str | None) -> None:
    from servicekit import logs, runtime

    logs.configure("WARNING", "json")
    env = {k: v for k, v in os.environ.items() if k.startswith("RATION_")}
    database_url = env["RATION_DATABASE_URL"]
    if cprofile is None:
        runtime.run(_serve(database_url, env))
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        runtime.run(_serve(database_url, env))
    finally:
        profiler.disable()
        profiler.dump_stats(cprofile)


# --- the parent: servers, load, CPU readings ----------------------------------------------------


@dataclass
class Server:
    root: Path
    popen: subprocess.Popen[str]
    port: int
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """utime + stime of the server process (all its threads) so far."""
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # fields[0] is the state (field 3 of proc(5)); utime and stime are fields 14 and 15.
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def start_server(root: Path, env: dict[str, str], cprofile: str | None) -> Server:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("RATION_")}
    child_env.update(env)
    child_env["PYTHONPATH"] = f"{root}{os.pathsep}{root / 'gen' / 'python'}"
    argv = [sys.executable, "-m", "bench.profile_server", "--serve"]
    if cprofile is not None:
        argv += ["--cprofile", cprofile]
    popen = subprocess.Popen(
        argv, cwd=root, env=child_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert popen.stdout is not None
    for line in popen.stdout:
        if line.startswith(PORT_LINE):
            return Server(root, popen, int(line[len(PORT_LINE) :]))
    raise RuntimeError(f"the server of {root} exited with {popen.wait()} before serving")


def stop_server(server: Server) -> None:
    assert server.popen.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        server.popen.stdin.close()
    try:
        server.popen.wait(30)
    except subprocess.TimeoutExpired:
        server.popen.kill()
        server.popen.wait()


def _token_file(directory: Path, token: str) -> str:
    path = directory / "tokens.json"
    row = {
        "sha256": hashlib.sha256(token.encode()).hexdigest(),
        "tenant": "profile",
        "roles": ["admin"],
    }
    path.write_text(json.dumps({"tokens": [row]}))
    return str(path)


Call = Callable[[int], Awaitable[None]]


class _Stub:
    """The four budget methods the load calls, as raw multicallables."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        from ration.budget.v1 import budget_pb2 as pb

        self.OpenRun = unary(channel, SERVICE + "OpenRun", pb.OpenRunResponse)
        self.Reserve = unary(channel, SERVICE + "Reserve", pb.ReserveResponse)
        self.Consume = unary(channel, SERVICE + "Consume", pb.ConsumeResponse)
        self.Check = unary(channel, SERVICE + "Check", pb.CheckResponse)


class Load:
    """Callers over a few channels of one server; each phase is `count` operations."""

    def __init__(self, target: str, token: str | None, channels: int, runs: int) -> None:
        self._channels = [grpc.aio.insecure_channel(target) for _ in range(channels)]
        self._stubs = [_Stub(c) for c in self._channels]
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._runs = runs

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    def run_id(self, index: int) -> str:
        return f"profile-run-{index % self._runs:05d}"

    async def open_runs(self) -> None:
        from ration.budget.v1 import budget_pb2 as pb

        policy = pb.BudgetPolicy(max_tokens=10**15, max_cost_nanos=10**18)

        async def one(index: int) -> None:
            stub = self._stubs[index % len(self._stubs)]
            request = pb.OpenRunRequest(
                request_id=uuid.uuid4().hex,
                run_id=self.run_id(index),
                project_id="profile-project",
                workflow_id="profile-workflow",
                agent_id="profile-agent",
                policy=policy,
            )
            await stub.OpenRun(request, metadata=self._metadata, timeout=60)

        await self._drive(one, self._runs, 8)

    async def pair(self, index: int) -> None:
        from ration.budget.v1 import budget_pb2 as pb

        stub = self._stubs[index % len(self._stubs)]
        run_id = self.run_id(index)
        held = await stub.Reserve(
            pb.ReserveRequest(
                request_id=uuid.uuid4().hex,
                run_id=run_id,
                model=MODEL,
                estimate=pb.Amounts(tokens=1_000, cost_nanos=2_000_000),
                ttl_seconds=60,
            ),
            metadata=self._metadata,
            timeout=60,
        )
        await stub.Consume(
            pb.ConsumeRequest(
                request_id=uuid.uuid4().hex,
                run_id=run_id,
                reservation_id=held.reservation.reservation_id,
                model=MODEL,
                usage=pb.Amounts(tokens=800, cost_nanos=1_600_000),
            ),
            metadata=self._metadata,
            timeout=60,
        )

    async def check(self, index: int) -> None:
        from ration.budget.v1 import budget_pb2 as pb

        stub = self._stubs[index % len(self._stubs)]
        request = pb.CheckRequest(
            run_id=self.run_id(index),
            estimate=pb.Amounts(tokens=1_000, cost_nanos=2_000_000),
            model=MODEL,
        )
        await stub.Check(request, metadata=self._metadata, timeout=60)

    @staticmethod
    async def _drive(call: Call, count: int, callers: int) -> None:
        indexes = iter(range(count))

        async def caller() -> None:
            for index in indexes:  # shared: each index is taken by one caller
                await call(index)

        await asyncio.gather(*(caller() for _ in range(callers)))

    async def phase(self, server: Server, name: str, count: int, callers: int) -> float:
        """Runs `count` operations; returns the server's CPU milliseconds per RPC."""
        call, rpcs = (self.pair, 2 * count) if name == "pairs" else (self.check, count)
        before = server.cpu_seconds()
        await self._drive(call, count, callers)
        return (server.cpu_seconds() - before) * 1000 / rpcs


@dataclass(frozen=True)
class Options:
    roots: list[Path]
    rounds: int
    count: int
    callers: int
    channels: int
    runs: int
    warmup: int
    dev: bool
    cprofile: Path | None
    phases: tuple[str, ...] = ("pairs", "check")


PHASES = ("pairs", "check")


async def measure(servers: Sequence[Server], token: str | None, options: Options) -> None:
    loads = [Load(s.target, token, options.channels, options.runs) for s in servers]
    try:
        await loads[0].open_runs()
        for load in loads:  # warm every server's caches, pools and code paths
            for name in options.phases:
                await load._drive(load.pair if name == "pairs" else load.check, options.warmup, 4)
        for round_no in range(options.rounds):
            # Rotate who goes first, so no server always meets the same background.
            order = list(range(len(servers)))
            order = order[round_no % len(order) :] + order[: round_no % len(order)]
            for name in options.phases:
                for i in order:
                    started = time.monotonic()
                    ms = await loads[i].phase(servers[i], name, options.count, options.callers)
                    servers[i].samples.setdefault(name, []).append(ms)
                    wall = time.monotonic() - started
                    print(
                        f"round {round_no + 1} {name:<5} {servers[i].root}: "
                        f"{ms:.3f} ms CPU/RPC ({wall:.1f} s)",
                        flush=True,
                    )
    finally:
        for load in loads:
            await load.close()


@contextlib.contextmanager
def running(
    database: BenchDatabase, options: Options, workdir: Path, token: str | None
) -> Iterator[list[Server]]:
    token_file = None if token is None else _token_file(workdir, token)
    env = _service_env(database.app_url, database.owner_url, token_file)
    servers: list[Server] = []
    try:
        for n, root in enumerate(options.roots):
            profile = None
            if options.cprofile is not None:
                options.cprofile.mkdir(parents=True, exist_ok=True)
                profile = str((options.cprofile / f"{n}.pstats").resolve())
            servers.append(start_server(root, env, profile))
            if n == 0:  # the first server migrated; the others find the schema current
                env["RATION_MIGRATE_ON_START"] = "false"
        yield servers
    finally:
        for server in servers:
            stop_server(server)


def summary(servers: Sequence[Server], phases: Sequence[str]) -> None:
    """Medians per server and, against the first, the median of the per-round differences
    (each round's servers ran back to back, so the difference is the steadier figure)."""
    print("\nmedian server CPU per RPC (ms):")
    first = servers[0]
    for server in servers:
        cells = []
        for name in phases:
            cell = f"{name} {statistics.median(server.samples[name]):.3f}"
            if server is not first:
                pairs = zip(server.samples[name], first.samples[name], strict=True)
                delta = statistics.median(mine - theirs for mine, theirs in pairs)
                cell += f" ({delta:+.3f} vs first)"
            cells.append(cell)
        print(f"  {server.root}: {'  '.join(cells)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_server", description=__doc__)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", action="append", type=Path, help="source tree (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=1500, help="pairs, and Checks, per phase")
    parser.add_argument("--callers", type=int, default=4, help="concurrent callers")
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--runs", type=int, default=200, help="runs the calls spread over")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--dev", action="store_true", help="no token file (development mode)")
    parser.add_argument("--cprofile", type=Path, help="directory for each server's pstats")
    parser.add_argument("--phases", default="pairs,check", help="pairs and/or check, in order")
    args = parser.parse_args(argv)
    if args.serve:
        serve_child(None if args.cprofile is None else str(args.cprofile))
        return 0
    options = Options(
        roots=[r.resolve() for r in (args.root or [ROOT])],
        rounds=args.rounds,
        count=args.count,
        callers=args.callers,
        channels=args.channels,
        runs=args.runs,
        warmup=args.warmup,
        dev=args.dev,
        cprofile=args.cprofile,
        phases=tuple(p for p in args.phases.split(",") if p),
    )
    unknown = set(options.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    token = None if options.dev else secrets.token_hex(16)
    with (
        postgres_server() as pg,
        bench_database(pg) as database,
        tempfile.TemporaryDirectory(prefix="ration-profile-") as workdir,
        running(database, options, Path(workdir), token) as servers,
    ):
        asyncio.run(measure(servers, token, options))
        summary(servers, options.phases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
