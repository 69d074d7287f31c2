"""The CPU pool behind a real gRPC server: handlers see the call's deadline, and CPU work of a
call whose deadline passed while it waited never runs (issue 17 item 5)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from servicekit.auth import current_identity
from servicekit.cpu import CpuPool, current_deadline
from servicekit.db import Database
from servicekit.server import ServiceApp, ServiceRunner
from servicekit.settings import DatabaseSettings, Env, ServerSettings

SERVICE = "ration.test.v1.CpuProbe"


class Probe:
    """A service with one CPU worker: `Block` holds it until released, `Work` records a run."""

    def __init__(self) -> None:
        self.pool = CpuPool(workers=1, tenant_share=10)
        self.release = threading.Event()
        self.blocking = threading.Event()
        self.ran: list[str] = []

    def app(self, database: Database, registry: CollectorRegistry) -> ServiceApp:
        def block() -> str:
            self.blocking.set()
            assert self.release.wait(30)
            return "released"

        def work(name: str) -> str:
            self.ran.append(name)
            return name

        async def deadline(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            when = current_deadline()
            remaining = None if when is None else when - time.monotonic()
            return json.dumps({"remaining": remaining}).encode()

        async def run_block(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return (await self.pool.run(current_identity().tenant, block)).encode()

        async def run_work(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return (await self.pool.run(current_identity().tenant, work, request.decode())).encode()

        def register(server: grpc.aio.Server) -> None:
            handlers = {
                "Deadline": grpc.unary_unary_rpc_method_handler(deadline),
                "Block": grpc.unary_unary_rpc_method_handler(run_block),
                "Work": grpc.unary_unary_rpc_method_handler(run_work),
            }
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(SERVICE, handlers),)
            )

        async def close() -> None:
            self.release.set()
            self.pool.close()

        roles = {f"/{SERVICE}/{name}": None for name in ("Deadline", "Block", "Work")}
        return ServiceApp(
            "cpuprobe", SERVICE, "ration.test.v1", [], register, close=close, roles=roles
        )


@pytest.fixture
async def probe(database_url: str) -> AsyncIterator[tuple[Probe, grpc.aio.Channel]]:
    values = {
        "RATION_CPUPROBE_LISTEN": "127.0.0.1:0",
        "RATION_CPUPROBE_METRICS_LISTEN": "off",
        "RATION_SHUTDOWN_GRACE_MS": "100",
    }
    probe = Probe()
    runner = ServiceRunner(
        probe.app,
        ServerSettings.from_env(Env(values), "cpuprobe", 0, 0),
        Database(database_url, DatabaseSettings.from_env(Env(values))),
    )
    await runner.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield probe, channel
    await runner.stop()


def method(channel: grpc.aio.Channel, name: str) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(f"/{SERVICE}/{name}")


async def test_a_handler_sees_the_calls_deadline(probe: tuple[Probe, grpc.aio.Channel]) -> None:
    _, channel = probe
    answer = json.loads(await method(channel, "Deadline")(b"", timeout=30))
    # The deadline comes from grpc's time_remaining(), which grpc computes on its own clocks,
    # not on time.monotonic(): a handler once saw 30.09 s of a 30 s timeout (a CI run on a
    # loaded host, 2026-12-07). The call's deadline, then, within half a second.
    assert 0 < answer["remaining"] <= 30.5
    assert json.loads(await method(channel, "Deadline")(b""))["remaining"] is None


async def test_work_of_a_call_out_of_time_while_it_waited_never_runs(
    probe: tuple[Probe, grpc.aio.Channel],
) -> None:
    server, channel = probe
    blocked = asyncio.ensure_future(method(channel, "Block")(b"", timeout=60))
    assert await asyncio.to_thread(server.blocking.wait, 10)
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await method(channel, "Work")(b"late", timeout=0.3)  # waits behind Block, runs out
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(100):  # the server side of the call is cancelled shortly after
        if server.pool.waiting == 0:
            break
        await asyncio.sleep(0.02)
    assert server.pool.waiting == 0  # it left the queue without running
    server.release.set()
    assert await blocked == b"released"
    assert await method(channel, "Work")(b"in time", timeout=30) == b"in time"
    assert server.ran == ["in time"]
