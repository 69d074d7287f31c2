"""The memory measurements in order: prefill, appends around each size, top-up, ListMemory."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import grpc

from bench import memory
from bench.caller import describe, unavailable
from bench.database import admin, no_autovacuum
from bench.servers import ServerProcess

if TYPE_CHECKING:
    from bench.runner import Runner

T = TypeVar("T")
# Content numbers of measured appends, far from the prefill's 0..size.
APPEND_CONTENT_BASE = 10_000_000


class Unavailable(Exception):
    """A setup call answered UNIMPLEMENTED or RELEVANCE_UNAVAILABLE (or failed otherwise)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def call(what: str, work: Callable[[memory.Memories], Awaitable[T]], address: str) -> T:
    """Runs one setup coroutine on a fresh channel; RPC errors become `Unavailable`."""

    async def main() -> T:
        async with grpc.aio.insecure_channel(address) as channel:
            return await work(memory.Memories(channel))

    try:
        return asyncio.run(main())
    except grpc.aio.AioRpcError as error:
        reason = unavailable(error)
        if reason is not None:
            raise Unavailable("not available", f"{what}: {reason}") from None
        raise Unavailable("failed", f"{what}: {describe(error)}") from None


class MemoryFlow:
    def __init__(
        self, runner: Runner, server: ServerProcess, kinds: Sequence[str], url: str
    ) -> None:
        self.runner = runner
        self.url = url
        self.config = runner.config
        self.server = server
        self.kinds = kinds
        self.sizes = sorted(self.config.sizes)

    def names(self, kind: str) -> list[str]:
        return [f"{kind}.{size}" for size in self.sizes]

    def run(self) -> None:
        appends = "memory.append" in self.kinds
        fresh = "memory.append_fresh" in self.kinds
        plan = {s: self.config.append_plan(s) if appends or fresh else (0, 1) for s in self.sizes}
        start = {
            memory.memory_ref(size, k): size - window
            for size, (window, copies) in plan.items()
            for k in range(copies if appends else 1)
        }
        if fresh:
            # A fresh deployment: the tables were never analyzed, and stay so until settle().
            asyncio.run(admin(self.url, no_autovacuum("memory")))
            start.update(
                (memory.memory_ref(size, k, "fresh"), size - window)
                for size, (window, copies) in plan.items()
                for k in range(copies)
            )
        try:
            self.prefill(start)
        except Unavailable as error:
            self.runner.skip(
                [n for k in self.kinds for n in self.names(k)], error.status, error.reason
            )
            return
        if fresh:
            for size in self.sizes:
                self.appends(size, *plan[size], kind="fresh")
        self.settle()
        if appends:
            for size in self.sizes:
                self.appends(size, *plan[size])
        for kind in ("memory.list_recency", "memory.list_relevance"):
            if kind in self.kinds:
                for size in self.sizes:
                    self.listing(kind, size)

    def prefill(self, start: dict[str, int]) -> None:
        """Fills every memory to its starting count, all memories in parallel."""
        batch = self.config.batch
        began = time.monotonic()

        async def fill(m: memory.Memories) -> list[int]:
            return list(await asyncio.gather(*(m.fill(r, 0, n, batch) for r, n in start.items())))

        call("AppendEntries (prefill)", fill, self.server.address)
        seconds = time.monotonic() - began
        total = sum(start.values())
        self.runner.results.setup["memory.prefill"] = {
            "memories": len(start),
            "entries": total,
            "batch": batch,
            "seconds": round(seconds, 2),
            "entries_per_s": round(total / seconds, 1) if seconds else None,
        }
        self.config.log(f"{'memory prefill':<30} {total:,} entries in {seconds:.1f} s")

    def settle(self) -> None:
        """After the bulk load, what pgbench does before every run: VACUUM (with ANALYZE) and a
        checkpoint, so that autovacuum and a checkpoint triggered by the prefill's WAL do not
        land inside the measurements of whichever size happens to be measured next."""
        began = time.monotonic()
        asyncio.run(admin(self.url, "VACUUM (ANALYZE)"))
        with contextlib.suppress(asyncpg.PostgresError):  # needs superuser or pg_checkpoint
            asyncio.run(admin(self.url, "CHECKPOINT"))
        self.runner.results.setup["memory.settle_seconds"] = round(time.monotonic() - began, 2)

    def appends(self, size: int, window: int, copies: int, kind: str = "memory") -> None:
        """Sequential single-entry appends, round robin over `copies` memories of `size - window`
        entries, each growing by at most `window`; then the first is topped up to `size` (not
        the `fresh` ones: nothing lists them)."""
        refs = [memory.memory_ref(size, k, kind) for k in range(copies)]
        spec = self.config.spec(
            "memory.append",
            self.server.address,
            params={"memory_refs": refs, "start": APPEND_CONTENT_BASE + size * 1_000},
            processes=1,
            concurrency=1,
            warmup=0.0,
            max_ops=min(window * copies, self.config.append_samples),
        )
        figure = self.runner.load(spec, self.server)
        if kind == "fresh":
            figure.update(memories=copies, entries_from=size - window, analyzed=False)
            self.runner.record(
                self.runner.results.figures, f"memory.append_fresh.{size}", {**figure, "size": size}
            )
            return
        appended = -(-int(figure.get("ops", 0)) // copies)  # the first memory gets the most

        async def top_up(m: memory.Memories) -> int:
            try:
                have = await m.active(refs[0])
            except grpc.aio.AioRpcError:
                have = size - window + appended  # GetCapacity not there yet: trust our count
            await m.fill(refs[0], have, size, self.config.batch)
            return have

        figure.update(memories=copies, entries_from=size - window)
        try:
            figure["entries_after"] = call("top-up", top_up, self.server.address)
        except Unavailable as error:
            figure["note"] = f"top-up to {size}: {error}"
        self.runner.record(
            self.runner.results.figures, f"memory.append.{size}", {**figure, "size": size}
        )

    def listing(self, kind: str, size: int) -> None:
        relevance = kind == "memory.list_relevance"
        ref = memory.memory_ref(size)
        name = f"{kind}.{size}"
        try:
            sample = call("ListMemory", lambda m: m.sample(ref, relevance), self.server.address)
        except Unavailable as error:
            self.runner.skip([name], error.status, error.reason)
            return
        spec = self.config.spec(
            "memory.list", self.server.address, params={"memory_ref": ref, "relevance": relevance}
        )
        figure: dict[str, Any] = self.runner.load(spec, self.server)
        self.runner.record(
            self.runner.results.figures,
            name,
            {
                **figure,
                "size": size,
                "token_budget": memory.TOKEN_BUDGET,
                "token_counter": "o200k_base",
                "rank": "relevance" if relevance else "recency",
                "sample": sample,
            },
        )
