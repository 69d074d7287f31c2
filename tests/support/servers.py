"""Real servers for tests, built from the registry: the environment of an in-process server,
one on its own thread (to outlive per-test event loops), a module's shared servers, and its
/metrics text."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ration_server import registry
from servicekit.server import ServiceRunner
from servicekit.settings import Env
from tests.support import adapters, dbroles


def service_env(database_url: str, **overrides: str) -> Env:
    values = {
        "RATION_DATABASE_URL": database_url,
        "RATION_BUDGET_LISTEN": "127.0.0.1:0",
        "RATION_BUDGET_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_MEMORY_LISTEN": "127.0.0.1:0",
        "RATION_MEMORY_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_DB_POOL_MIN": "1",
        "RATION_HEALTH_PROBE_MS": "200",
        "RATION_SHUTDOWN_GRACE_MS": "200",
        # Gauges on every sweep, as tests read them soon after the calls that move them.
        "RATION_GAUGE_INTERVAL_MS": "10",
    }
    values.update(overrides)
    return Env(values)


StartServer = Callable[..., Awaitable[ServiceRunner]]
T = TypeVar("T")


def build_runner(kind: str, database_url: str, **overrides: str) -> ServiceRunner:
    """A ServiceRunner for 'budget' or 'memory', configured as the `start_server` fixture does:
    connected as the session's application role, with the session's shared heavy adapters."""
    database_url = dbroles.current().app_url(database_url)
    return registry.build_runner(
        kind,
        service_env(database_url, **overrides),
        database_url,
        adapters=adapters.for_service(kind),
    )


class ThreadedServer:
    """A real in-process server on its own event loop and thread, so one server can outlive the
    per-test event loops of a whole module."""

    def __init__(self, kind: str, database_url: str, **overrides: str) -> None:
        self._build: Callable[[], ServiceRunner] = lambda: build_runner(
            kind, database_url, **overrides
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.runner: ServiceRunner | None = None

    @property
    def address(self) -> str:
        assert self.runner is not None
        return f"127.0.0.1:{self.runner.port}"

    def _run(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def start(self) -> ThreadedServer:
        self._thread.start()

        async def start() -> ServiceRunner:
            runner = self._build()
            await runner.start()
            await asyncio.wait_for(runner.ready.wait(), timeout=60)
            return runner

        self.runner = self._run(start(), 90)
        return self

    def stop(self) -> None:
        if self.runner is not None:
            self._run(self.runner.stop(), 30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class SharedServers:
    """A module's servers on one database: one ThreadedServer per kind, started when a test
    first asks for it and stopped when the module ends. For tests that isolate themselves by
    unique ids (STYLE: Cosmic Python), so they need neither a server nor a database each."""

    def __init__(self, database_url: str, **overrides: str) -> None:
        self._database_url = database_url
        self._overrides = overrides
        self._servers: dict[str, ThreadedServer] = {}

    def address(self, kind: str) -> str:
        """The address of the module's 'budget' or 'memory' server."""
        if kind not in self._servers:
            server = ThreadedServer(kind, self._database_url, **self._overrides)
            self._servers[kind] = server.start()
        return self._servers[kind].address

    def stop(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()


def scrape(port: int) -> str:
    """The /metrics text of a server (served from its own thread, so a blocking read is fine)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())
