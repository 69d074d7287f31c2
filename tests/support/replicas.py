"""Calls to a set of replicas that fail over as the real client does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from tests.support.procs import BIN, Proc, clean_env

RETRY_ELSEWHERE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Replicas:
    """Stubs on every replica; `call` sends the same request (so the same request_id) to the
    next replica when one answers UNAVAILABLE, as the real client does."""

    def __init__(self, addresses: Sequence[str], stub_type: Callable[[grpc.aio.Channel], Any]):
        self.channels = [grpc.aio.insecure_channel(a) for a in addresses]
        self.stubs = [stub_type(c) for c in self.channels]
        self.dead: set[int] = set()
        self.failovers = 0

    async def call(
        self, prefer: int, method: str, request: Any, *, seconds: float = 10, attempts: int = 8
    ) -> Any:
        last: grpc.aio.AioRpcError | None = None
        for attempt in range(attempts):
            order = [prefer % len(self.stubs), *range(len(self.stubs))]
            for index in dict.fromkeys(order):
                if index in self.dead:
                    continue
                try:
                    return await getattr(self.stubs[index], method)(request, timeout=seconds)
                except grpc.aio.AioRpcError as error:
                    if error.code() not in RETRY_ELSEWHERE:
                        raise
                    last = error
                    self.failovers += 1
            await asyncio.sleep(0.05 * (attempt + 1))
        assert last is not None
        raise last

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


@contextlib.contextmanager
def budget_processes(database_url: str, count: int = 2, **env: str) -> Iterator[list[Proc]]:
    """`count` `ration budget serve` processes on one database (each with its own pools and
    caches, as replicas are deployed), ready; stopped afterwards."""
    settings = clean_env(RATION_DATABASE_URL=database_url, **env)
    procs = [Proc.start([str(BIN / "ration"), "budget", "serve"], settings) for _ in range(count)]
    try:
        for proc in procs:
            proc.wait_for("ready:")
        yield procs
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.stop()
