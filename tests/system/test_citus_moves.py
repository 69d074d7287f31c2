"""Moving a tenant on Citus while the services write, the way deploy/README.md documents it:
`isolate_tenant_to_new_shard(…, 'CASCADE', shard_transfer_mode => 'block_writes')`, then
`citus_move_shard_placement(…, shard_transfer_mode => 'block_writes')` to the other worker,
each under a statement timeout. Writers keep calling Reserve and Consume, and AppendEntries,
throughout; nothing they were granted or wrote is lost, and no call fails beyond the client's
own retries. Without the shard fence (budget.shard_fence_v1, memory.shard_fence_v1) the engine
mixed rows of the old shard with the new one during the split (a hold outlived its run's
held amount, events repeated a sequence number) and calls after the move found no run.

Runs when RATION_TEST_CITUS_URL names a Citus coordinator (see tests/system/test_citus.py);
skipped with a one-line reason otherwise.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import asyncpg
import grpc
import pytest

from ration_client import Amounts, BudgetClient, BudgetPolicy, MemoryClient
from ration_client.errors import RationError
from servicekit.auth import DEV_TENANT
from tests.support import citus
from tests.support.citus_shards import placement
from tests.support.citus_stack import Stack, running_stack

REASON = citus.skip_reason()
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]

T = TypeVar("T")
WRITERS = 4
EACH = 10  # tokens per pair
# The README's bound on each move: a move that cannot finish fails instead of hanging.
MOVE_TIMEOUT = "120s"
# Retries of a call the client's own retries did not carry through: DEADLINE_EXCEEDED or
# STORE_UNAVAILABLE when writes stay blocked longer than the call's deadline or the
# service's statement timeout (RATION_DB_STATEMENT_TIMEOUT_MS).
RETRIES = 50


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_stack() as running:
        yield running


class Writers:
    """Reserve+Consume pairs on one run each, and appends of one entry to one memory, until
    stopped; counts what was granted and written, and what the calls saw before a retry
    carried them through. A pair or an append is always finished once begun."""

    def __init__(self, budget: str, memory: str) -> None:
        self.budget = budget
        self.memory = memory
        self.pairs = [0] * WRITERS
        self.appends = 0
        self.seen: Counter[str] = Counter()
        self.stop = asyncio.Event()
        self.progress = asyncio.Event()

    async def run(self, i: int, run_id: str) -> None:
        async with BudgetClient(self.budget) as budget:
            while not self.stop.is_set():
                await self._pair(budget, run_id)
                self.pairs[i] += 1
                self.progress.set()

    async def append(self, memory_ref: str) -> None:
        async with MemoryClient(self.memory) as memory:
            while not self.stop.is_set():
                await self._append(memory, memory_ref)
                self.appends += 1

    async def _append(self, memory: MemoryClient, memory_ref: str) -> None:
        asked, entry = str(uuid.uuid4()), f"entry {self.appends}"
        await self._retried(lambda: memory.append(memory_ref, [entry], request_id=asked))

    async def _pair(self, budget: BudgetClient, run_id: str) -> None:
        asked = str(uuid.uuid4())
        held = await self._retried(
            lambda: budget.reserve(
                run_id, model="m", estimate=Amounts(tokens=EACH), request_id=asked
            )
        )
        settled = str(uuid.uuid4())
        await self._retried(
            lambda: budget.consume(
                run_id,
                model="m",
                reservation_id=held.reservation.reservation_id,
                usage=Amounts(tokens=EACH),
                request_id=settled,
            )
        )

    async def _retried(self, call: Callable[[], Awaitable[T]]) -> T:
        """The call again with the same request id (replayed, never applied twice) while it
        fails retryably or past its deadline (blocked behind a move)."""
        for _ in range(RETRIES):
            try:
                return await call()
            except RationError as error:
                if not (error.retryable or error.code is grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                self.seen[error.reason or error.code.name] += 1
                await asyncio.sleep(0.05)
        raise AssertionError(f"refused beyond {RETRIES} retries: {dict(self.seen)}")

    async def until_each_did(self, more: int) -> None:
        target = [p + more for p in self.pairs]
        while any(p < t for p, t in zip(self.pairs, target, strict=True)):
            self.progress.clear()
            await self.progress.wait()


async def _move(admin_url: str, *statements: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"SET statement_timeout = '{MOVE_TIMEOUT}'")
        rows: list[asyncpg.Record] = []
        for statement in statements:
            rows = list(await conn.fetch(statement))
        return rows
    finally:
        await conn.close()


async def test_a_tenant_isolated_and_moved_while_the_services_write(stack: Stack) -> None:
    database = stack.database
    before = await placement(database, DEV_TENANT)
    target = next(w for w in database.workers if w != before.node)
    runs = [f"moving-{i}" for i in range(WRITERS)]
    async with BudgetClient(stack.budget) as budget:
        for run_id in runs:
            await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=10**9))
    writers = Writers(stack.budget, stack.memory)
    tasks = [asyncio.create_task(writers.run(i, r)) for i, r in enumerate(runs)]
    tasks.append(asyncio.create_task(writers.append("moving-notes")))
    try:
        await asyncio.wait_for(writers.until_each_did(5), timeout=30)
        isolated = await _move(
            database.admin_url,
            "SELECT isolate_tenant_to_new_shard('budget.runs', $$" + DEV_TENANT + "$$,"
            " 'CASCADE', shard_transfer_mode => 'block_writes') AS shard",
        )
        shard = isolated[0]["shard"]
        await asyncio.wait_for(writers.until_each_did(5), timeout=30)
        await _move(
            database.admin_url,
            f"SELECT citus_move_shard_placement({shard}, '{before.node.host}',"
            f" {before.node.port}, '{target.host}', {target.port},"
            " shard_transfer_mode => 'block_writes')",
        )
        await asyncio.wait_for(writers.until_each_did(5), timeout=30)
    finally:
        writers.stop.set()
        failures = [r for r in await asyncio.gather(*tasks, return_exceptions=True) if r]
    assert failures == [], f"{failures[0]!r}; retried {dict(writers.seen)}"
    after = await placement(database, DEV_TENANT)
    assert after.node == target
    assert after.shards.isdisjoint(before.shards)  # a shard group of its own
    assert shard in after.shards
    async with BudgetClient(stack.budget) as budget:
        for i, run_id in enumerate(runs):
            run = await budget.get_run(run_id)
            tokens = next(s for s in run.dimensions if s.dimension.value == "tokens")
            assert (tokens.consumed, tokens.held) == (writers.pairs[i] * EACH, 0), run_id
    async with MemoryClient(stack.memory) as memory:
        capacity = await memory.capacity("moving-notes")
    assert capacity.active_entry_count == capacity.revision == writers.appends > 0
    log = "".join(stack.services.errors)
    assert "unhandled" not in log, log[-3000:]
    print(f"pairs {writers.pairs}, appends {writers.appends}, retried {dict(writers.seen)}")
