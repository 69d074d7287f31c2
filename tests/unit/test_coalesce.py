"""servicekit.coalesce: concurrent reads share statements without reading the past."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from servicekit.coalesce import Coalescer


class Store:
    """A fake fetch target: records each batch; `gate` holds a fetch until the test opens it."""

    def __init__(self) -> None:
        self.value = 0
        self.batches: list[tuple[str, list[str]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def fetch(self, group: str, keys: Sequence[str]) -> Mapping[str, int]:
        self.batches.append((group, list(keys)))
        seen = self.value  # what a statement sees is fixed when it starts
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return {k: seen for k in keys if k != "absent"}


async def test_an_idle_read_goes_out_alone_and_at_once() -> None:
    store = Store()
    reads = Coalescer(store.fetch)
    assert await reads.get("t1", "a") == 0
    assert await reads.get("t1", "absent") is None
    assert store.batches == [("t1", ["a"]), ("t1", ["absent"])]


async def test_reads_arriving_during_a_fetch_share_the_next_one_and_see_later_writes() -> None:
    store = Store()
    reads = Coalescer(store.fetch)
    store.gate.clear()
    first = asyncio.create_task(reads.get("t1", "a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert store.batches == [("t1", ["a"])]  # in flight, holding the value 0
    store.value = 1  # a write commits; the reads below arrive after it
    later = [asyncio.create_task(reads.get("t1", k)) for k in ("a", "b", "b", "c")]
    await asyncio.sleep(0)
    assert len(store.batches) == 1  # they wait for the flight instead of riding it
    store.gate.set()
    assert await first == 0
    assert await asyncio.gather(*later) == [1, 1, 1, 1]  # read-your-writes: none sees 0
    assert store.batches == [("t1", ["a"]), ("t1", ["a", "b", "c"])]


async def test_groups_never_share_a_statement() -> None:
    store = Store()
    reads = Coalescer(store.fetch)
    got = list(
        await asyncio.gather(reads.get("t1", "a"), reads.get("t2", "a"), reads.get("t1", "b"))
    )
    assert got == [0, 0, 0]
    assert sorted(store.batches) == [("t1", ["a", "b"]), ("t2", ["a"])]


async def test_a_failed_fetch_fails_its_batch_and_the_next_batch_still_runs() -> None:
    store = Store()
    reads = Coalescer(store.fetch)
    store.fail = RuntimeError("database down")
    results = await asyncio.gather(
        reads.get("t1", "a"), reads.get("t1", "b"), return_exceptions=True
    )
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    store.fail = None
    assert await reads.get("t1", "a") == 0


async def test_a_cancelled_reader_leaves_the_others_answered() -> None:
    store = Store()
    reads = Coalescer(store.fetch)
    store.gate.clear()
    blocker = asyncio.create_task(reads.get("t1", "x"))
    await asyncio.sleep(0)
    quitter = asyncio.create_task(reads.get("t1", "a"))
    stayer = asyncio.create_task(reads.get("t1", "a"))
    await asyncio.sleep(0)
    quitter.cancel()
    store.gate.set()
    assert await stayer == 0
    assert await blocker == 0
    with pytest.raises(asyncio.CancelledError):
        await quitter


async def test_batches_are_bounded() -> None:
    store = Store()
    reads = Coalescer(store.fetch, max_batch=2)
    store.gate.clear()
    blocker = asyncio.create_task(reads.get("t1", "x"))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(reads.get("t1", k)) for k in "abcde"]
    await asyncio.sleep(0)
    store.gate.set()
    await asyncio.gather(blocker, *rest)
    assert [keys for _, keys in store.batches] == [["x"], ["a", "b"], ["c", "d"], ["e"]]
