"""Concurrent point reads that share one statement: one query per group in flight, the next
batch gathering while it runs (group commit, for reads).

A read that arrives while its group's query is in flight waits for it to finish and goes out
with the next batch. Each read's statement is therefore sent after the read arrived, so it sees
every write committed before then (read-your-writes holds), and an idle service adds no delay:
the first read of a quiet group leaves at once. Under load a batch carries every read that
arrived during the previous round trip, so the per-statement costs (pool checkout, the round
trip, parse and plan, the function call) are paid once per batch instead of once per read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
G = TypeVar("G", bound=Hashable)

# Reads per statement at most; more wait for the next one.
MAX_BATCH = 256

Fetch = Callable[[G, Sequence[K]], Awaitable[Mapping[K, V]]]


class Coalescer(Generic[G, K, V]):
    """`get(group, key)` answers `fetch(group, keys)[key]` (None when absent), sharing fetches.

    `group` is what a statement cannot mix (e.g. the tenant a statement runs as). A failed fetch
    fails every read of its batch with the same exception.
    """

    def __init__(self, fetch: Fetch[G, K, V], max_batch: int = MAX_BATCH) -> None:
        self._fetch = fetch
        self._max_batch = max_batch
        self._waiting: dict[G, dict[K, list[asyncio.Future[V | None]]]] = {}
        self._flying: set[G] = set()

    async def get(self, group: G, key: K) -> V | None:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(group, {}).setdefault(key, []).append(future)
        if group not in self._flying:
            self._flying.add(group)
            asyncio.get_running_loop().create_task(self._fly(group))
        return await future

    async def _fly(self, group: G) -> None:
        try:
            while True:
                waiting = self._waiting.get(group)
                if not waiting:
                    self._waiting.pop(group, None)
                    return
                keys = list(waiting)[: self._max_batch]
                batch = {key: waiting.pop(key) for key in keys}
                await self._answer(group, batch)
        finally:
            self._flying.discard(group)
            for futures in self._waiting.pop(group, {}).values():  # left only by cancellation
                for future in futures:
                    future.cancel()

    async def _answer(self, group: G, batch: dict[K, list[asyncio.Future[V | None]]]) -> None:
        live = [key for key, futures in batch.items() if any(not f.done() for f in futures)]
        if not live:  # every caller went away (cancelled) meanwhile
            return
        try:
            found = await self._fetch(group, live)
        except Exception as exc:
            for futures in batch.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        except BaseException:  # cancelled (shutdown): so are the reads it carried
            for futures in batch.values():
                for future in futures:
                    future.cancel()
            raise
        for key, futures in batch.items():
            value = found.get(key)
            for future in futures:
                if not future.done():
                    future.set_result(value)
