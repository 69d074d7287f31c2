"""Health polling: a server's status now, and the sequence of statuses it reported."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNREACHABLE = -1  # no answer at all (the process is gone or not listening yet)


async def health_status(channel: grpc.aio.Channel, seconds: float = 1.0) -> int:
    """The server's overall health status, or UNREACHABLE."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=seconds)
    except grpc.aio.AioRpcError:
        return UNREACHABLE
    return int(reply.status)


@dataclass
class HealthWatch:
    """Polls a server's health and keeps the sequence of distinct statuses it reported."""

    address: str
    interval: float = 0.05
    seen: list[int] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            while True:
                status = await health_status(channel)
                if not self.seen or self.seen[-1] != status:
                    self.seen.append(status)
                await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def wait_for(self, status: int, within: float) -> None:
        """Until the latest status is `status`; fails with the history after `within` s."""
        deadline = time.monotonic() + within
        while not (self.seen and self.seen[-1] == status):
            assert time.monotonic() < deadline, f"health never became {status}: {self.seen}"
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
