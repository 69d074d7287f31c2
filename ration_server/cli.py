"""The `ration` command: `up`, `budget serve`, `memory serve`, `migrate`, `demo`, `report`,
`pools`, `notify`, `keys`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only light imports up here: main() installs the Ctrl-C handler first, so that a signal that
# comes during the heavy imports (grpc, asyncpg, pgserver) is recorded, not raised mid-import.
from ration_server import __version__, registry
from servicekit import logs, runtime
from servicekit.embedded import EmbeddedPostgresError
from servicekit.logs import say
from servicekit.settings import DatabaseSettings, Env, SettingsError, postgres_target
from servicekit.shutdown import STOP, Interrupted, Stop

if TYPE_CHECKING:
    from servicekit.server import ServiceRunner

# 128 + SIGINT: `migrate` or `demo` stopped before they finished. A server that is asked to
# stop (`up`, `serve`) exits 0, at whatever moment of its start the signal came.
INTERRUPTED = 130


@contextlib.asynccontextmanager
async def database_url(settings: DatabaseSettings, stop: Stop) -> AsyncIterator[str]:
    """The configured server, or an embedded one that stops when we leave the block. The
    embedded start runs in a thread: a stop request waits for it, then stops the server."""
    if settings.url:
        yield settings.url
        return
    from servicekit.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.data_dir)
    say(f"postgres: embedded, data in {embedded.data_dir}")
    # A Ctrl-C reaches initdb and pg_ctl too; pgserver then logs their failure at length.
    logging.getLogger("pgserver").addFilter(lambda record: not stop.requested)
    try:
        try:
            url = await asyncio.to_thread(embedded.start)
        except Exception:
            await stop.settle()  # initdb may die of the Ctrl-C before the loop has read it
            if stop.requested:  # Ctrl-C reached pg_ctl/initdb too, which gave up
                raise Interrupted from None
            raise
        stop.check()
        yield url
    finally:
        if not await asyncio.to_thread(embedded.stop):
            pid = embedded.postmaster_pid()
            say(f"postgres: the embedded server (pid {pid}) is still running; stop it: kill {pid}")


@contextlib.asynccontextmanager
async def serving(
    names: Sequence[str], env: Env, stop: Stop, *, shared_port: bool = False
) -> AsyncIterator[list[ServiceRunner]]:
    """Database, then each service; yields once all are SERVING. Leaving the block (normally,
    by Interrupted or by an error) stops whatever had started, in reverse order."""
    from servicekit.ports import check_service_ports

    built = [registry.configure(name, env) for name in names]
    for service in built:  # before Postgres starts: a taken port fails at once
        check_service_ports(service.name, service.server, grpc=not shared_port)
    stop.check()
    async with database_url(built[0].database, stop) as url:
        runners: list[ServiceRunner] = []
        try:
            for service in built:
                stop.check()
                runner = service.runner(url, reuse_port=shared_port)
                runners.append(runner)
                await runner.start()
            await stop.race(_ready_or_failed(runners))
            runtime.settle_heap()
            yield runners
        finally:
            for runner in reversed(runners):
                await runner.stop()


async def _ready_or_failed(runners: Sequence[ServiceRunner]) -> None:
    """Until every runner is SERVING; a runner that cannot serve as configured (e.g. a
    privileged database role) raises its SettingsError (exit 2 with its message, main)."""
    waiters: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(asyncio.gather(*(r.ready.wait() for r in runners))),
        *(asyncio.ensure_future(r.failed.wait()) for r in runners),
    ]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    for runner in runners:
        if runner.error is not None:
            raise runner.error


def _metrics_url(runner: ServiceRunner) -> str:
    if not runner.metrics_port:
        return "off"
    return f"http://{runner.settings.metrics_host}:{runner.metrics_port}/metrics"


async def _serve(names: Sequence[str], env: Env, stop: Stop, shared_port: bool = False) -> int:
    async with stop.watching():
        try:
            async with serving(names, env, stop, shared_port=shared_port) as runners:
                # The human block comes last, after every startup log line.
                for name, runner in zip(names, runners, strict=True):
                    say(f"{name}_service: grpc {runner.address}  metrics {_metrics_url(runner)}")
                say("ready: all services SERVING (Ctrl-C to stop)")
                await stop.wait()
        except Interrupted:
            pass
    say("stopped")
    return 0


async def _migrate(env: Env, stop: Stop, distribute: bool) -> int:
    import asyncpg

    from servicekit import citus
    from servicekit.migrations import migrate

    settings = DatabaseSettings.from_env(env)
    sets = registry.all_migrations()
    schemas = [m.schema for m in sets]
    async with stop.watching(), database_url(settings, stop) as url:
        # The owner role migrates: RATION_MIGRATE_DATABASE_URL when set, else the service URL.
        target = settings.migrate_url or url
        try:
            conn = await stop.race(asyncpg.connect(target, timeout=10))
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            variable = (
                "RATION_MIGRATE_DATABASE_URL" if settings.migrate_url else settings.url_variable
            )
            print(
                f"ration migrate: cannot connect to {postgres_target(target)} ({variable}): "
                f"{_cause(exc)}",
                file=sys.stderr,
            )
            return 2
        try:
            applied = await stop.race(migrate(conn, sets))
            # Once distributed, every later migration is distributed in the same step.
            if distribute or await citus.distributed(conn, schemas):
                try:
                    distributed = await stop.race(citus.distribute(conn, schemas))
                except RuntimeError as exc:
                    print(f"ration migrate: {exc}", file=sys.stderr)
                    return 2
            else:
                distributed = None
        finally:
            await conn.close()
    say("\n".join(applied) if applied else "migrations: up to date")
    if distributed is not None:
        lines = distributed.lines
        if not distributed.steps:
            lines.append("citus: everything distributed")
        say("\n".join(lines))
    return 0


def _cause(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def demo_data_dir(settings: DatabaseSettings) -> Path:
    """The demo's own embedded data directory, beside `make run`'s: a demo never writes into
    the database a running `ration up` holds."""
    return settings.data_dir.with_name(settings.data_dir.name + "-demo")


async def _demo(budget: str | None, memory: str | None, env: Env, stop: Stop) -> int:
    """Runs the scripted agent against given addresses, or against a stack started here."""
    from ration_client import RationError
    from ration_server.demo import run_demo

    token = os.environ.get("RATION_TOKEN")
    async with stop.watching():
        try:
            if budget and memory:
                await stop.race(run_demo(budget, memory, token=token))
                return 0
            overrides = {
                "RATION_BUDGET_LISTEN": "127.0.0.1:0",
                "RATION_MEMORY_LISTEN": "127.0.0.1:0",
                "RATION_BUDGET_METRICS_LISTEN": "off",
                "RATION_MEMORY_METRICS_LISTEN": "off",
            }
            if DatabaseSettings.from_env(env).url is None:
                overrides["RATION_DATA_DIR"] = str(demo_data_dir(DatabaseSettings.from_env(env)))
            local = Env({**os.environ, **overrides})
            async with serving(("budget", "memory"), local, stop) as runners:
                await stop.race(run_demo(runners[0].address, runners[1].address, token=token))
        except RationError as error:
            print(f"ration demo: {error}{_demo_hint(error)}", file=sys.stderr)
            return 2
    return 0


def _demo_hint(error: Exception) -> str:
    from ration_client import PermissionDenied, Unauthenticated, Unavailable

    if isinstance(error, Unauthenticated):
        return " (set RATION_TOKEN to a token with the writer role)"
    if isinstance(error, PermissionDenied):
        return " (RATION_TOKEN must hold the writer role; a reader token cannot open runs)"
    if isinstance(error, Unavailable):
        return " (is the service running at --budget / --memory?)"
    return ""


async def _client_command(
    name: str, run: Callable[..., Awaitable[None]], args: argparse.Namespace, stop: Stop
) -> int:
    """Runs a command against a running service, with the bearer token of RATION_TOKEN; a
    refusal (ErrorInfo reason and message) is one line on stderr, exit 1."""
    from ration_client import RationError

    async with stop.watching():
        try:
            await stop.race(run(args, token=os.environ.get("RATION_TOKEN")))
        except RationError as error:
            print(f"ration {name}: {error}", file=sys.stderr)
            return 1
    return 0


async def _report(args: argparse.Namespace, stop: Stop) -> int:
    """Prints a spend report of a running budget service (RATION_TOKEN: a reader token)."""
    from ration_server.report import run_report

    return await _client_command("report", run_report, args, stop)


async def _pools(args: argparse.Namespace, stop: Stop) -> int:
    """Lists, shows, puts or deletes pooled budgets (RATION_TOKEN: an admin token)."""
    from ration_server.pools import run_pools

    return await _client_command("pools", run_pools, args, stop)


async def _keys(args: argparse.Namespace, stop: Stop) -> int:
    """Issued API keys of a running budget service (RATION_TOKEN: an admin token)."""
    from ration_client import RationError
    from ration_server.keys import run_keys

    async with stop.watching():
        try:
            await stop.race(run_keys(args, token=os.environ.get("RATION_TOKEN")))
        except RationError as error:
            print(f"ration keys: {error}", file=sys.stderr)
            return 1
    return 0


async def _notify(env: Env, stop: Stop) -> int:
    """Follows the configured tenants' events and POSTs alerts until stopped (exit 0)."""
    from ration_server.notify import run_notify

    async with stop.watching():
        try:
            return await run_notify(env, stop)
        except Interrupted:
            pass
    say("stopped")
    return 0


async def _supervise(service: str, workers: int, env: Env, stop: Stop) -> int:
    from servicekit.workers import check_ports, supervise

    configured = registry.configure(service, env)
    check_ports(service, workers, configured.server)
    command = registry.worker_command(service)
    async with stop.watching(), database_url(configured.database, stop) as url:
        return await asyncio.to_thread(supervise, command, service, workers, url, stop)


def main(argv: Sequence[str] | None = None) -> int:
    stop = STOP
    stop.install()
    # gRPC's fork handlers only log ("skipping fork() handlers") when pg_ctl is spawned; no
    # process here forks to use gRPC in the child.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    parser = argparse.ArgumentParser(prog="ration", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="both services on one database (embedded if none is set)")
    for name in registry.SERVICES:
        sub = commands.add_parser(name, help=f"the {name} service")
        sub.add_argument("action", choices=["serve"])
        # Set by the supervisor of RATION_WORKERS > 1 for its workers only.
        sub.add_argument("--shared-port", action="store_true", help=argparse.SUPPRESS)
    migrate = commands.add_parser("migrate", help="apply pending migrations of both schemas")
    migrate.add_argument(
        "--distribute",
        action="store_true",
        help="on a Citus coordinator: distribute the schemas by tenant (idempotent; "
        "later runs of `ration migrate` repeat it by themselves)",
    )
    demo = commands.add_parser(
        "demo",
        help="a scripted agent run under a budget, shown live",
        description="A scripted agent run under a budget, shown live. Without addresses it "
        "starts both services itself, on RATION_DATABASE_URL or on an embedded Postgres of its "
        "own (RATION_DATA_DIR with a -demo suffix, never the one `make run` holds). Against "
        "running services (--budget and --memory, both), RATION_TOKEN is the bearer token "
        "sent: a token with the writer role when they have a token file.",
    )
    demo.add_argument(
        "--budget", help="budget service address (with --memory; default: start a local stack)"
    )
    demo.add_argument("--memory", help="memory service address (with --budget)")
    from ration_server.report import add_arguments

    report = commands.add_parser("report", help="spend of a time window (ReportSpend), as a table")
    add_arguments(report)
    pools = commands.add_parser(
        "pools",
        help="list, show, put or delete pooled budgets (RATION_TOKEN: an admin token)",
        description="Pooled budgets of a running budget service (RATION_BUDGET_ADDRESS or "
        "--budget), with the admin token in RATION_TOKEN. Limits left out are unbounded; "
        "`-` in a table is unbounded.",
    )
    from ration_server.pools import add_arguments as add_pool_arguments

    add_pool_arguments(pools)
    commands.add_parser(
        "notify", help="POST budget alerts of the tenants' event streams to webhooks"
    )
    from ration_server.keys import add_arguments as add_key_arguments

    add_key_arguments(commands.add_parser("keys", help="issued API keys: create, list, ..."))
    args = parser.parse_args(argv)
    if args.command == "demo" and bool(args.budget) != bool(args.memory):
        demo.error("--budget and --memory go together: give both addresses, or neither")

    env = Env()
    try:
        logs.configure(env.text("RATION_LOG_LEVEL", "INFO"), logs.log_format(env))
        if args.command == "up":
            return runtime.run(_serve(registry.SERVICES, env, stop))
        if args.command == "migrate":
            return runtime.run(_migrate(env, stop, args.distribute))
        if args.command == "demo":
            if not (args.budget and args.memory):
                logs.configure("WARNING", logs.log_format(env))  # the demo's lines are the output
            return runtime.run(_demo(args.budget, args.memory, env, stop))
        if args.command == "report":
            logs.configure("WARNING", logs.log_format(env))  # the table is the output
            return runtime.run(_report(args, stop))
        if args.command == "pools":
            logs.configure("WARNING", logs.log_format(env))  # the table is the output
            return runtime.run(_pools(args, stop))
        if args.command == "notify":
            return runtime.run(_notify(env, stop))
        if args.command == "keys":
            logs.configure("WARNING", logs.log_format(env))  # the lines are the output
            return runtime.run(_keys(args, stop))
        workers = env.integer("RATION_WORKERS", 1, minimum=1)
        if workers > 1:
            return runtime.run(_supervise(args.command, workers, env, stop))
        return runtime.run(_serve([args.command], env, stop, args.shared_port))
    except SettingsError as exc:
        print(f"ration: configuration error: {exc}", file=sys.stderr)
        return 2
    except Interrupted:
        say("interrupted")
        return INTERRUPTED
    except EmbeddedPostgresError as exc:  # the details are in the log lines above and its log
        print(f"ration: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
