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

A caller that is cancelled (deadline, disconnect) while its item still waits leaves the queue
at once; once sent, the item completes with its batch and the answer is dropped. A failing
batch of several items is split in halves and each half sent again, so one bad item cannot
fail the others (the database rolled the failed statement back as a whole); an outage
(`DomainError` UNAVAILABLE) fails the whole batch at once instead, since splitting cannot help.
A batch runs with the latest deadline among its items (none if any item has none).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from servicekit.cpu import current_deadline, deadline_var
from servicekit.errors import DomainError, ErrorKind

G = TypeVar("G", bound=Hashable)
I = TypeVar("I")  # noqa: E741 - the item type
R = TypeVar("R")

Send = Callable[[G, Sequence[I]], Awaitable[Sequence[R]]]

# Items per statement at most; more wait for the next one.
MAX_BATCH = 64
# Batches of one group at the database at once from this process.
INFLIGHT = 2


@dataclass(frozen=True)
class BatchSettings:
    """How a service batches: items per statement, batches per group at once."""

    max_items: int = MAX_BATCH
    inflight: int = INFLIGHT


@dataclass
class _Waiting(Generic[I, R]):
    item: I
    deadline: float | None
    future: asyncio.Future[R]


@dataclass
class _Group(Generic[I, R]):
    queue: list[_Waiting[I, R]] = field(default_factory=list)
    flying: int = 0


def _discard(future: asyncio.Future[R]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved, so an unread failure is not reported as lost


class GroupCommit(Generic[G, I, R]):
    def __init__(
        self,
        send: Send[G, I, R],
        *,
        max_batch: int = MAX_BATCH,
        inflight: int = INFLIGHT,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        if max_batch < 1 or inflight < 1:
            raise ValueError("max_batch and inflight must be at least 1")
        self._send = send
        self._max_batch = max_batch
        self._inflight = inflight
        self._observe = observe
        self._groups: dict[G, _Group[I, R]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, group: G, item: I) -> R:
        loop = asyncio.get_running_loop()
        waiting = _Waiting[I, R](item, current_deadline(), loop.create_future())
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
        try:
            return await asyncio.shield(waiting.future)
        except asyncio.CancelledError:
            if waiting in state.queue:  # not sent yet: leave at once
                state.queue.remove(waiting)
            else:  # sent: its batch completes without it; nobody reads the answer
                waiting.future.add_done_callback(_discard)
            raise

    async def _fly(self, group: G, state: _Group[I, R]) -> None:
        try:
            while state.queue:
                batch = state.queue[: self._max_batch]
                del state.queue[: len(batch)]
                await self._answer(group, batch)
        finally:
            state.flying -= 1
            if not state.flying and not state.queue and self._groups.get(group) is state:
                del self._groups[group]

    async def _answer(self, group: G, batch: list[_Waiting[I, R]]) -> None:
        deadlines = [w.deadline for w in batch]
        deadline_var.set(None if None in deadlines else max(d for d in deadlines if d))
        if self._observe is not None:
            self._observe(len(batch))
        try:
            answers = await self._send(group, [w.item for w in batch])
        except Exception as exc:
            outage = isinstance(exc, DomainError) and exc.kind is ErrorKind.UNAVAILABLE
            if len(batch) > 1 and not outage:
                half = len(batch) // 2
                await self._answer(group, batch[:half])
                await self._answer(group, batch[half:])
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
