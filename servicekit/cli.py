"""The `ration` command: `up`, `budget serve`, `memory serve`, `migrate`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from servicekit import logs
from servicekit.db import Database
from servicekit.embedded import EmbeddedPostgres
from servicekit.logs import say
from servicekit.server import ServiceRunner
from servicekit.settings import DatabaseSettings, Env, ServerSettings, SettingsError

RunnerSpec = tuple[str, Callable[[Database], ServiceRunner]]


def _budget(
    env: Env,
) -> tuple[ServerSettings, DatabaseSettings, Callable[[Database], ServiceRunner]]:
    from budget_service.app import factory
    from budget_service.settings import BudgetSettings

    settings = BudgetSettings.from_env(env)
    return (
        settings.server,
        settings.database,
        lambda db: ServiceRunner(factory(settings), settings.server, db),
    )


def _memory(
    env: Env,
) -> tuple[ServerSettings, DatabaseSettings, Callable[[Database], ServiceRunner]]:
    from memory_service.app import factory
    from memory_service.settings import MemorySettings

    settings = MemorySettings.from_env(env)
    return (
        settings.server,
        settings.database,
        lambda db: ServiceRunner(factory(settings), settings.server, db),
    )


SERVICES = {"budget": _budget, "memory": _memory}


@contextlib.contextmanager
def database_url(settings: DatabaseSettings) -> Iterator[str]:
    """The configured server, or an embedded one that stops when we leave the block."""
    if settings.url:
        yield settings.url
        return
    embedded = EmbeddedPostgres(settings.data_dir)
    say(f"postgres: embedded, data in {embedded.data_dir}")
    try:
        yield embedded.start()
    finally:
        embedded.stop()


async def _serve(names: Sequence[str], env: Env) -> int:
    built = [(name, *SERVICES[name](env)) for name in names]
    db_settings = built[0][2]
    with database_url(db_settings) as url:
        runners = [make(Database(url, dbs)) for _, _, dbs, make in built]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            for runner in runners:
                await runner.start()
            for (name, *_), runner in zip(built, runners, strict=True):
                metrics = (
                    f"http://{runner.settings.metrics_host}:{runner.metrics_port}/metrics"
                    if runner.metrics_port
                    else "off"
                )
                say(f"{name}_service: grpc {runner.address}  metrics {metrics}")
            ready = asyncio.ensure_future(asyncio.gather(*(r.ready.wait() for r in runners)))
            stopped = asyncio.ensure_future(stop.wait())
            failures = [asyncio.ensure_future(r.failed.wait()) for r in runners]
            either: list[asyncio.Future[Any]] = [ready, stopped, *failures]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            for failure in failures:
                failure.cancel()
            for runner in runners:
                if runner.error is not None:
                    ready.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await ready
                    raise runner.error  # exit 2 with its message (main)
            if not stop.is_set():
                say("ready: all services SERVING (Ctrl-C to stop)")
                await stopped
            ready.cancel()
        finally:
            for runner in runners:
                await runner.stop()
        say("stopped")
    return 0


async def _migrate(env: Env) -> int:
    import asyncpg

    from budget_service.app import MIGRATIONS as BUDGET
    from memory_service.app import MIGRATIONS as MEMORY
    from servicekit.migrations import migrate

    settings = DatabaseSettings.from_env(env)
    with database_url(settings) as url:
        # The owner role migrates: RATION_MIGRATE_DATABASE_URL when set, else the service URL.
        conn = await asyncpg.connect(settings.migrate_url or url)
        try:
            applied = await migrate(conn, [BUDGET, MEMORY])
        finally:
            await conn.close()
    say("\n".join(applied) if applied else "migrations: up to date")
    return 0


async def _demo(budget: str | None, memory: str | None, env: Env) -> int:
    """Runs the scripted agent against given addresses, or against a stack started here."""
    from ration_client.demo import run_demo

    token = os.environ.get("RATION_TOKEN")
    if budget and memory:
        await run_demo(budget, memory, token=token)
        return 0
    overrides = {
        "RATION_BUDGET_LISTEN": "127.0.0.1:0",
        "RATION_MEMORY_LISTEN": "127.0.0.1:0",
        "RATION_BUDGET_METRICS_LISTEN": "off",
        "RATION_MEMORY_METRICS_LISTEN": "off",
    }
    local = Env({**os.environ, **overrides})
    built = [SERVICES[name](local) for name in ("budget", "memory")]
    with database_url(built[0][1]) as url:
        runners = [make(Database(url, dbs)) for _, dbs, make in built]
        try:
            for runner in runners:
                await runner.start()
            await asyncio.gather(*(asyncio.wait_for(r.ready.wait(), 60) for r in runners))
            await run_demo(runners[0].address, runners[1].address, token=token)
        finally:
            for runner in runners:
                await runner.stop()
    return 0


def _supervise(service: str, workers: int, env: Env) -> int:
    from servicekit.workers import supervise

    server, database, _ = SERVICES[service](env)
    with database_url(database) as url:
        return supervise(service, workers, url, f"{server.host}:{server.port}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ration", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="both services on one database (embedded if none is set)")
    for name in SERVICES:
        sub = commands.add_parser(name, help=f"the {name} service")
        sub.add_argument("action", choices=["serve"])
    commands.add_parser("migrate", help="apply pending migrations of both schemas")
    demo = commands.add_parser("demo", help="a scripted agent run under a budget, shown live")
    demo.add_argument("--budget", help="budget service address (default: start a local stack)")
    demo.add_argument("--memory", help="memory service address")
    args = parser.parse_args(argv)

    logs.configure(os.environ.get("RATION_LOG_LEVEL", "INFO"))
    env = Env()
    try:
        if args.command == "up":
            return asyncio.run(_serve(["budget", "memory"], env))
        if args.command == "migrate":
            return asyncio.run(_migrate(env))
        if args.command == "demo":
            if not (args.budget and args.memory):
                logs.configure("WARNING")  # the demo's own lines are the output
            return asyncio.run(_demo(args.budget, args.memory, env))
        workers = env.integer("RATION_WORKERS", 1, minimum=1)
        if workers > 1:
            return _supervise(args.command, workers, env)
        return asyncio.run(_serve([args.command], env))
    except SettingsError as exc:
        print(f"ration: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
