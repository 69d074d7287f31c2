"""A few calls per run at a time from this process: later ones wait here, not on the row lock.

Postgres stays the only arbiter: every call still locks its run row, and replicas still meet
only there. The gate only keeps a process from sending many calls for one run at once, which
would each hold a pooled connection and a backend blocked on that row (every commit waking all
of them to fight for it again) while calls for other runs wait for a connection. Two in flight
per run keeps the next one queued inside Postgres, so the row lock passes on without waiting
for a round trip. (bench: half the callers on one run, half spread: the spread half completed
about 1.6 times as many pairs as without the gate.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from servicekit.errors import store_unavailable


@dataclass
class _Gate:
    slots: asyncio.Semaphore
    users: int = 0


PER_RUN = 2


class RunGates:
    def __init__(self, wait_seconds: float, per_run: int = PER_RUN) -> None:
        self._wait_seconds = wait_seconds
        self._per_run = per_run
        self._gates: dict[tuple[str, str], _Gate] = {}

    @contextlib.asynccontextmanager
    async def reservation(self, tenant: str, run_id: str) -> AsyncIterator[None]:
        """Waits at most as long as for a pooled connection, then fails as retryable."""
        key = (tenant, run_id)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(asyncio.Semaphore(self._per_run))
        gate.users += 1
        try:
            try:
                async with asyncio.timeout(self._wait_seconds):
                    await gate.slots.acquire()
            except TimeoutError:
                raise store_unavailable("too many calls for this run are waiting; retry") from None
            try:
                yield
            finally:
                gate.slots.release()
        finally:
            gate.users -= 1
            if not gate.users:
                del self._gates[key]
