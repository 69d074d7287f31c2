"""Group commit: the mutations in flight go to the database as one statement, one transaction.

Beside servicekit/coalesce.py (which shares reads), `GroupCommit.submit(group, item)` hands
an item to `send(group, items)`, which decides and commits a whole batch and returns one
answer per item, in order. Batching is natural, with no timer: while `inflight` batches of a
group are at the database, new items wait and go together in the next batch, so an idle
service sends one item alone at once (no fixed cost added at low load) and a loaded one pays
the statement, round trip and COMMIT once per batch. Each caller is answered only after its
batch's `send` returned, i.e. after COMMIT.

Groups (tenants) queue separately and each has at most `inflight` batches at the database, so
one tenant's flood delays only that tenant's items, never another tenant's.

Equal batches in flight are not equal shares: a group with many callers sends big batches,
which cost the database little more than a neighbour's small ones, and so took most of the
machine's calls (tenant A with 64 callers on hot runs had 2.4 times the calls of tenant B with
8, and B's p99 went 2.5 times up; issue 24). With a `Pacer`, while several groups each have
items waiting behind their own batch (each wants more than it gets), none sends items faster
than the fastest of the others: before a batch, a group ahead of them all waits until its rate
has come down to the next one's, or to `floor` items a second (at most `Pacer.max_wait`, and
never so long that a waiting item could not be sent before its deadline; the items waiting
meanwhile join the batch). A group alone, or beside groups whose items never wait (a few calls
now and then), is never paced. The price: two groups that both keep their queues full get the
same rate from a process even while the database could serve one of them more; the floor
bounds what a neighbour whose own batches are slow can cost the others (`BatchSettings.paced`
turns pacing off).

A caller that is cancelled (deadline, disconnect) while its item still waits leaves the queue
at once; once sent, the item completes with its batch and the answer is dropped. A failing
batch of several items is split in halves and each half sent again, so one bad item cannot
fail the others (the database rolled the failed statement back as a whole); an outage
(`DomainError` UNAVAILABLE) fails the whole batch at once instead, since splitting cannot help.
A batch waits for a pooled connection no longer than its most impatient item's deadline
allows (an item without one waits `default_wait` seconds); when the pool stays full that long
(STORE_BUSY), only the items whose time is up are answered STORE_BUSY, and the others go back
to the head of the queue to wait on, each within its own deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from servicekit.cpu import current_deadline, deadline_var
from servicekit.errors import DomainError, ErrorKind, store_busy

G = TypeVar("G", bound=Hashable)
I = TypeVar("I")  # noqa: E741 - the item type
R = TypeVar("R")

Send = Callable[[G, Sequence[I]], Awaitable[Sequence[R]]]

# Items per statement at most; more wait for the next one.
MAX_BATCH = 64
# Batches of one group at the database at once from this process.
INFLIGHT = 1
# An item with no deadline of its own may wait this long for a connection.
DEFAULT_WAIT_SECONDS = 2.0
# A paced group is never held below this many items a second.
PACING_FLOOR = 200.0
# An item whose deadline is nearer than this when the pool was busy is answered STORE_BUSY.
REQUEUE_MARGIN_SECONDS = 0.05


@dataclass(frozen=True)
class BatchSettings:
    """How a service batches: items per statement, batches per group at once, whether
    backlogged groups are paced to equal rates, and the rate none is held below."""

    max_items: int = MAX_BATCH
    inflight: int = INFLIGHT
    paced: bool = True
    pacing_floor: float = PACING_FLOOR


@dataclass(eq=False)
class _Waiting(Generic[I, R]):
    item: I
    deadline: float
    future: asyncio.Future[R]
    abandoned: bool = False  # its caller is gone: never sent again


@dataclass
class _Group(Generic[I, R]):
    queue: list[_Waiting[I, R]] = field(default_factory=list)
    flying: int = 0


class Pacer(Generic[G]):
    """Equal rates of items for the groups that each have items waiting (see the module).

    A group's rate is an exponentially weighted count of the items it sent, over `tau`
    seconds. A group is backlogged for `memory` seconds after it sent a batch of items that
    had waited behind its previous one. `wait(group)` is how long the group should hold its
    next batch: 0 unless every other backlogged group's rate is below its own, else until its
    own has decayed to the fastest of theirs (never below `floor`), at most `max_wait` and
    `at_most`."""

    def __init__(
        self,
        tau: float = 0.5,
        memory: float = 0.1,
        max_wait: float = 0.5,
        floor: float = PACING_FLOOR,
        observe_hold: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if tau <= 0 or memory <= 0 or max_wait < 0 or floor <= 0:
            raise ValueError("tau, memory and floor must be positive, max_wait not negative")
        self.tau, self.memory, self.max_wait = tau, memory, max_wait
        self.floor = floor
        self._observe_hold = observe_hold  # told each hold's seconds
        self._clock = clock
        self._rates: dict[G, tuple[float, float]] = {}  # group -> (rate, when)
        self._backlogged: dict[G, float] = {}  # group -> until when

    def rate(self, group: G) -> float:
        return self._rate(group, self._clock())

    def _rate(self, group: G, now: float) -> float:
        rate, at = self._rates.get(group, (0.0, now))
        return rate * math.exp(-(now - at) / self.tau)

    def sent(self, group: G, items: int, *, backlog: bool) -> None:
        now = self._clock()
        self._rates[group] = (self._rate(group, now) + items / self.tau, now)
        if backlog:
            self._backlogged[group] = now + self.memory
        if len(self._rates) > 1024:  # a group gone quiet needs no entry
            for quiet in [g for g in self._rates if self._rate(g, now) < 0.01]:
                del self._rates[quiet]

    def wait(self, group: G, at_most: float = math.inf) -> float:
        now = self._clock()
        for done in [g for g, until in self._backlogged.items() if until <= now]:
            del self._backlogged[done]
        others = [self._rate(g, now) for g in self._backlogged if g != group]
        if not others:
            return 0.0
        own, target = self._rate(group, now), max(max(others), self.floor)
        if own <= target:
            return 0.0
        hold = min(self.max_wait, at_most, self.tau * math.log(own / target))
        if hold <= 0:
            return 0.0
        if self._observe_hold is not None:
            self._observe_hold(hold)
        return hold


class GroupCommit(Generic[G, I, R]):
    def __init__(
        self,
        send: Send[G, I, R],
        *,
        max_batch: int = MAX_BATCH,
        inflight: int = INFLIGHT,
        observe: Callable[[int], None] | None = None,
        default_wait: float = DEFAULT_WAIT_SECONDS,
        pacer: Pacer[G] | None = None,
    ) -> None:
        if max_batch < 1 or inflight < 1:
            raise ValueError("max_batch and inflight must be at least 1")
        self._send = send
        self._max_batch = max_batch
        self._inflight = inflight
        self._observe = observe
        self._default_wait = default_wait
        self._groups: dict[G, _Group[I, R]] = {}
        self._pacer = pacer
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, group: G, item: I) -> R:
        loop = asyncio.get_running_loop()
        deadline = current_deadline()
        if deadline is None:
            deadline = time.monotonic() + self._default_wait
        waiting = _Waiting[I, R](item, deadline, loop.create_future())
        state = self._groups.get(group)
        if state is None:
            state = self._groups[group] = _Group()
        state.queue.append(waiting)
        if state.flying < self._inflight:
            state.flying += 1
            # A fresh context: a batch is nobody's call (its deadline is set per batch).
            task = loop.create_task(self._fly(group, state), context=contextvars.Context())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # Waiting in the queue is waiting for the database: bounded by the item's deadline
        # (STORE_BUSY then, if it is still queued). A call whose deadline is already too near
        # to wait for anything just goes: the database may still answer in time, and its
        # deadline ends the call otherwise. One timer per item, and the caller awaits the
        # item's own future: cancelling the caller cancels that future, which the batch then
        # skips (a cancelled future is done).
        patience = waiting.deadline - time.monotonic() - REQUEUE_MARGIN_SECONDS
        timer = loop.call_later(patience, self._expire, state, waiting) if patience > 0 else None
        try:
            return await waiting.future
        except asyncio.CancelledError:
            if waiting in state.queue:  # not sent yet: leave at once
                state.queue.remove(waiting)
            else:  # sent: its batch completes without it; nobody reads the answer
                waiting.abandoned = True
            raise
        finally:
            if timer is not None:
                timer.cancel()

    @staticmethod
    def _expire(state: _Group[I, R], waiting: _Waiting[I, R]) -> None:
        """The item's time to wait is up: STORE_BUSY if it is still queued; once sent, its
        batch answers it."""
        if waiting in state.queue and not waiting.future.done():
            state.queue.remove(waiting)
            waiting.future.set_exception(store_busy())

    async def _fly(self, group: G, state: _Group[I, R]) -> None:
        try:
            waited = False  # the items of a second batch waited behind the first
            while state.queue:
                if self._pacer is not None:
                    # Never past the point where its most impatient item must go to be
                    # answered in time: pacing delays calls, it never fails one.
                    soonest = min(w.deadline for w in state.queue)
                    pause = self._pacer.wait(
                        group, soonest - time.monotonic() - 2 * REQUEUE_MARGIN_SECONDS
                    )
                    if pause > 0:  # items waiting meanwhile join this batch
                        await asyncio.sleep(pause)
                        if not state.queue:  # all gone (cancelled)
                            break
                batch = state.queue[: self._max_batch]
                del state.queue[: len(batch)]
                if self._pacer is not None:
                    self._pacer.sent(group, len(batch), backlog=waited)
                await self._answer(group, state, batch)
                waited = True
        finally:
            state.flying -= 1
            if not state.flying and not state.queue and self._groups.get(group) is state:
                del self._groups[group]

    async def _answer(self, group: G, state: _Group[I, R], batch: list[_Waiting[I, R]]) -> None:
        deadline_var.set(min(w.deadline for w in batch))
        if self._observe is not None:
            self._observe(len(batch))
        try:
            answers = await self._send(group, [w.item for w in batch])
        except Exception as exc:
            busy = isinstance(exc, DomainError) and exc.reason == "STORE_BUSY"
            if busy:  # the pool stayed full: those with time left wait on, first in line
                now = time.monotonic()
                patient = [w for w in batch if w.deadline - now > REQUEUE_MARGIN_SECONDS]
                state.queue[:0] = [w for w in patient if not w.abandoned]
                batch = [w for w in batch if w not in patient]
            outage = isinstance(exc, DomainError) and exc.kind is ErrorKind.UNAVAILABLE
            if len(batch) > 1 and not outage:
                half = len(batch) // 2
                await self._answer(group, state, batch[:half])
                await self._answer(group, state, batch[half:])
                return
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(exc)
            return
        if len(answers) != len(batch):
            error = RuntimeError(f"{len(answers)} answers for a batch of {len(batch)}")
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(error)
            return
        for waiting, answer in zip(batch, answers, strict=True):
            if not waiting.future.done():
                waiting.future.set_result(answer)
