"""servicekit/batching.py: natural batching per group, splitting, outages, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from servicekit.batching import GroupCommit, Pacer
from servicekit.cpu import deadline_var
from servicekit.errors import DomainError, ErrorKind, store_busy
from tests.support.clock import ManualClock


class Recorder:
    """A `send` that records each batch and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.fail_on: set[int] = set()
        self.outage = False

    def gate(self, group: str) -> asyncio.Event:
        return self.gates.setdefault(group, asyncio.Event())

    async def send(self, group: str, items: Sequence[int]) -> list[str]:
        self.batches.append((group, list(items)))
        await self.gate(group).wait()
        if self.outage:
            raise DomainError(ErrorKind.UNAVAILABLE, "STORE_UNAVAILABLE", "down")
        if self.fail_on & set(items):
            raise RuntimeError("a bad item")
        return [f"{group}:{i}" for i in items]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_item_goes_alone_and_items_arriving_meanwhile_go_together() -> None:
    rec = Recorder()
    sizes: list[int] = []
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1, observe=sizes.append)
    first = asyncio.ensure_future(batcher.submit("t", 1))
    await settle()
    assert rec.batches == [("t", [1])]  # sent at once: no timer
    rest = [asyncio.ensure_future(batcher.submit("t", i)) for i in (2, 3, 4)]
    await settle()
    assert len(rec.batches) == 1
    assert not first.done()
    rec.gate("t").set()
    assert await first == "t:1"
    assert await asyncio.gather(*rest) == ["t:2", "t:3", "t:4"]
    assert rec.batches == [("t", [1]), ("t", [2, 3, 4])]
    assert sizes == [1, 3]


async def test_batches_are_bounded_and_inflight_batches_overlap() -> None:
    rec = Recorder()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, max_batch=2, inflight=2)
    calls = [asyncio.ensure_future(batcher.submit("t", i)) for i in range(5)]
    await settle()
    assert rec.batches == [("t", [0, 1]), ("t", [2, 3])]  # two at the database at once
    rec.gate("t").set()
    assert await asyncio.gather(*calls) == [f"t:{i}" for i in range(5)]
    assert rec.batches[-1] == ("t", [4])


async def test_a_groups_slow_batch_never_delays_another_group() -> None:
    rec = Recorder()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1)
    slow = asyncio.ensure_future(batcher.submit("a", 1))
    await settle()
    rec.gate("b").set()
    assert await asyncio.wait_for(batcher.submit("b", 2), timeout=5) == "b:2"
    assert not slow.done()
    rec.gate("a").set()
    assert await slow == "a:1"


async def test_a_failing_batch_is_split_so_one_bad_item_fails_alone() -> None:
    rec = Recorder()
    rec.fail_on = {3}
    rec.gate("t").set()
    blocker = asyncio.Event()

    async def hold_first(group: str, items: Sequence[int]) -> list[str]:
        if items == [0]:
            await blocker.wait()
        return await rec.send(group, items)

    batcher: GroupCommit[str, int, str] = GroupCommit(hold_first, inflight=1)
    first = asyncio.ensure_future(batcher.submit("t", 0))
    await settle()
    calls = [asyncio.ensure_future(batcher.submit("t", i)) for i in (1, 2, 3, 4)]
    await settle()
    blocker.set()
    assert await first == "t:0"
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[:2] == ["t:1", "t:2"]
    assert results[3] == "t:4"
    assert isinstance(results[2], RuntimeError)
    assert ("t", [1, 2, 3, 4]) in rec.batches
    assert ("t", [3]) in rec.batches


async def test_an_outage_fails_the_whole_batch_without_splitting() -> None:
    rec = Recorder()
    rec.outage = True
    rec.gate("t").set()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1)
    results = await asyncio.gather(
        *(batcher.submit("t", i) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, DomainError) and r.reason == "STORE_UNAVAILABLE" for r in results)
    assert len(rec.batches) <= 2  # the first alone, the rest together: never split


async def test_a_cancelled_waiting_item_leaves_the_queue_and_is_never_sent() -> None:
    rec = Recorder()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1)
    first = asyncio.ensure_future(batcher.submit("t", 1))
    await settle()
    gone = asyncio.ensure_future(batcher.submit("t", 2))
    kept = asyncio.ensure_future(batcher.submit("t", 3))
    await settle()
    gone.cancel()
    await settle()
    rec.gate("t").set()
    assert await first == "t:1"
    assert await kept == "t:3"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert rec.batches == [("t", [1]), ("t", [3])]


async def test_a_cancelled_sent_item_completes_with_its_batch() -> None:
    rec = Recorder()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1)
    sent = asyncio.ensure_future(batcher.submit("t", 1))
    await settle()
    sent.cancel()
    await settle()
    other = asyncio.ensure_future(batcher.submit("t", 2))
    rec.gate("t").set()
    assert await other == "t:2"
    assert rec.batches == [("t", [1]), ("t", [2])]


async def test_an_item_that_cannot_reach_the_database_by_its_deadline_is_store_busy() -> None:
    rec = Recorder()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, inflight=1)
    first = asyncio.ensure_future(batcher.submit("t", 1))  # holds the group's only flight
    await settle()
    token = deadline_var.set(time.monotonic() + 0.2)
    try:
        with pytest.raises(DomainError) as refused:
            await batcher.submit("t", 2)
    finally:
        deadline_var.reset(token)
    assert refused.value.reason == "STORE_BUSY"
    rec.gate("t").set()
    assert await first == "t:1"
    assert rec.batches == [("t", [1])]  # the refused item was never sent


async def test_a_busy_pool_refuses_only_the_impatient_and_requeues_the_rest() -> None:
    attempts: list[list[int]] = []

    async def busy_once(group: str, items: Sequence[int]) -> list[str]:
        attempts.append(list(items))
        if len(attempts) == 1:
            raise store_busy()
        return [f"{group}:{i}" for i in items]

    batcher: GroupCommit[str, int, str] = GroupCommit(busy_once, inflight=1, default_wait=30)
    token = deadline_var.set(time.monotonic() + 0.01)  # already within the margin
    try:
        impatient = asyncio.ensure_future(batcher.submit("t", 1))
    finally:
        deadline_var.reset(token)
    patient = asyncio.ensure_future(batcher.submit("t", 2))
    with pytest.raises(DomainError) as refused:
        await impatient
    assert refused.value.reason == "STORE_BUSY"
    assert await patient == "t:2"
    assert attempts[-1] == [2]


def test_a_pacer_never_holds_a_group_alone_or_beside_groups_that_never_wait() -> None:
    clock = ManualClock()
    pacer: Pacer[str] = Pacer(clock=clock)
    for _ in range(50):
        pacer.sent("a", 32, backlog=True)
        clock.now += 0.005
    assert pacer.wait("a") == 0.0  # alone, however fast
    pacer.sent("c", 1, backlog=False)  # a few calls now and then: never waited
    assert pacer.wait("a") == 0.0


def test_a_pacer_holds_the_group_ahead_of_every_other_backlogged_group() -> None:
    clock = ManualClock()
    holds: list[float] = []
    pacer: Pacer[str] = Pacer(
        tau=0.5, memory=0.1, max_wait=0.5, floor=1, observe_hold=holds.append, clock=clock
    )
    for _ in range(10):
        pacer.sent("a", 32, backlog=True)
        pacer.sent("b", 4, backlog=True)
        clock.now += 0.01
    rate_a, rate_b = pacer.rate("a"), pacer.rate("b")
    assert rate_a == pytest.approx(8 * rate_b)
    assert pacer.wait("b") == 0.0  # behind a: never held
    wait = pacer.wait("a")
    assert 0 < wait <= 0.5
    assert holds == [wait]  # counted (ration_budget_paced_seconds_total)
    clock.now += wait
    # held until its rate is down to b's, or for max_wait at most
    assert pacer.rate("a") >= pacer.rate("b") * 0.999 or wait == 0.5
    # b's backlog ends `memory` after its last batch: a goes on unheld
    clock.now += 0.2
    assert pacer.wait("a") == 0.0


def test_a_pacer_never_holds_a_group_below_its_floor() -> None:
    """A neighbour whose own batches are slow (backlogged at 40 items a second) holds a
    group ahead of it down to the floor, not down to its own rate."""
    clock = ManualClock()
    pacer: Pacer[str] = Pacer(tau=0.5, floor=200, clock=clock)
    for _ in range(100):
        pacer.sent("a", 8, backlog=True)
        pacer.sent("slow", 1, backlog=True)
        clock.now += 0.025  # a: 320 items a second, slow: 40
    wait = pacer.wait("a")
    assert wait > 0
    clock.now += wait
    assert pacer.rate("a") == pytest.approx(200, rel=0.01)  # the floor, not 40


async def test_pacing_never_holds_an_item_past_the_time_it_must_go() -> None:
    """a is far ahead of backlogged b (the pacer's clock stands still): unbounded, its next
    batch would wait max_wait (0.5 s) and the item, due in 0.3 s, would be STORE_BUSY; it goes
    in time instead."""
    clock = ManualClock()
    holds: list[float] = []
    pacer: Pacer[str] = Pacer(floor=1, observe_hold=holds.append, clock=clock)
    pacer.sent("b", 1, backlog=True)
    pacer.sent("a", 100, backlog=False)
    rec = Recorder()
    rec.gate("a").set()
    batcher: GroupCommit[str, int, str] = GroupCommit(rec.send, pacer=pacer)
    token = deadline_var.set(time.monotonic() + 0.3)
    try:
        assert await batcher.submit("a", 1) == "a:1"
    finally:
        deadline_var.reset(token)
    assert len(holds) == 1
    assert 0 < holds[0] <= 0.2  # held, but only until it had to go


async def _closed_loop(
    batcher: GroupCommit[str, int, str],
    group: str,
    callers: int,
    counted: tuple[float, float],
    done: dict[str, int],
) -> None:
    """`callers` callers sending until the end of `counted`, their answers counted in it."""

    async def caller(n: int) -> None:
        while time.monotonic() < counted[1]:
            await batcher.submit(group, 0)
            if time.monotonic() >= counted[0]:
                done[group] = done.get(group, 0) + 1
            await asyncio.sleep(0.001 * (n % 4))  # the round trip to the caller and back

    await asyncio.gather(*(caller(n) for n in range(callers)))


@pytest.mark.parametrize("paced", [True, False])
async def test_many_callers_buy_no_larger_share_while_both_groups_wait(paced: bool) -> None:
    """Closed-loop callers (each sends again a moment after its answer), 32 of group a and 4
    of group b, on a database whose statement takes 5 ms whatever the batch: unpaced, a's big
    batches carry about 8 items to b's one; paced, about as many each once the rates are known
    (counted from the first second on: the rates' time constant is half of one)."""

    async def send(group: str, items: Sequence[int]) -> list[str]:
        await asyncio.sleep(0.005)
        return [group] * len(items)

    pacer: Pacer[str] | None = Pacer(floor=1) if paced else None
    batcher: GroupCommit[str, int, str] = GroupCommit(send, pacer=pacer, default_wait=30)
    done: dict[str, int] = {}
    start = time.monotonic()
    counted = (start + 1.0, start + 2.5)
    await asyncio.gather(
        _closed_loop(batcher, "a", 32, counted, done),
        _closed_loop(batcher, "b", 4, counted, done),
    )
    share = done["a"] / done["b"]
    if paced:
        assert share < 1.6, done
    else:
        assert share > 4, done
