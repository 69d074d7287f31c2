"""CPU work off the event loop: one bounded pool, a per-tenant share, call deadlines honoured.

Redaction, sizing and embedding are CPU-bound and run in threads. On the shared default
executor one tenant's large writes queued ahead of everyone else's and ran even after their
callers had given up (issue 17 item 5). Here every job names its tenant and:

- a tenant holds at most `tenant_share` jobs (running or waiting); one more is refused with
  RESOURCE_EXHAUSTED `TENANT_BUSY` and a RetryInfo, before anything is queued (a call that
  splits its work into several jobs in a row is admitted once, by its first);
- a tenant runs at most `tenant_workers` jobs at once (by default every worker but one), so a
  worker is always free for another tenant's call: one tenant's big writes never make another
  tenant's small one wait for a job to end (issue 24);
- the pool is shared by work, not by jobs: each job names its cost (the bytes it works on),
  callers split large work into jobs of bounded cost (so a worker frees often), and a free
  worker takes the waiting job of the tenant with the least work running, ties to the tenant
  served longest ago, so a tenant with nothing running goes next whatever others queued;
- a tenant's calls finish in the order they started: a later job of a call that has begun
  (a large write's next part) goes before the tenant's jobs of calls not yet started, and a
  freed worker is handed out only after the caller whose job ended could queue its next one.
  Taking turns part by part, a tenant's 36 large writes all finished together at the end
  (none inside 18 s, issue 24); now each finishes as soon as its own parts are done. Other
  tenants are chosen as before (least work running), so they do not wait longer for it;
- a job whose call's deadline has passed is never started, and a waiting job whose caller is
  cancelled (the client gave up, the deadline passed) leaves the queue at once. A job that has
  started runs to its end (threads cannot be stopped) and keeps its worker and share until then;
- bulk work yields the CPU: a job of `bulk_cost` or more (a part of a large write) runs on
  threads of its own that the operating system schedules at a lower priority (nice
  BULK_NICE, Linux), beside the threads of small jobs, so a small write takes a core at once
  even while large writes keep every bulk thread busy, on a host whose cores the large writes
  would otherwise fill (issue 24: another tenant's small appends went from 128 ms to 400 ms
  p99). Niceness ranks threads within one scheduling group (see BULK_NICE): the bulk threads
  yield to this process's other threads, and to other processes only inside the same group.
  Each class has `workers` threads and the fairness rules above, apart.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from servicekit.errors import deadline_exceeded, tenant_busy
from servicekit.settings import Env

T = TypeVar("T")

# The monotonic time by which the current RPC must be answered; None without a deadline.
deadline_var: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "deadline", default=None
)
# Bounds of the RetryInfo delay a refused caller is given.
MIN_RETRY_SECONDS = 0.05
MAX_RETRY_SECONDS = 5.0
# The niceness of the bulk threads (the others keep the process's): Linux weighs a nice-10
# thread about a tenth of a nice-0 one when both want a core in the same scheduling group. A
# cgroup (a container, a systemd unit) or an autogroup (a session, with
# /proc/sys/kernel/sched_autogroup_enabled) is a group: its weight against other groups does
# not change with its threads' niceness (nice 19 gave the same noisy figures as 10, issue 24).
BULK_NICE = 10
# Jobs of this cost (characters) or more are bulk unless configured otherwise.
BULK_COST = 16 * 1024
NORMAL, BULK = 0, 1

log = logging.getLogger(__name__)


def _lower_priority() -> None:
    """Thread initializer of the bulk threads: a lower scheduling priority for this thread
    alone (on Linux a thread is a task of its own; elsewhere, or where refused, it stays)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BULK_NICE)
    except (AttributeError, OSError) as exc:  # not Linux-like, or not permitted
        log.debug("bulk CPU thread keeps its priority", extra={"error": repr(exc)})


class _CallDeadline:
    """The default of CpuPool.run's `deadline`: the current RPC's."""


CALL_DEADLINE = _CallDeadline()


def current_deadline() -> float | None:
    """The current RPC's deadline on time.monotonic()'s clock (set by the call interceptor)."""
    return deadline_var.get()


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """A call's deadline as a time.monotonic() instant, from its remaining time."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def default_tenant_workers(workers: int) -> int:
    """Every worker but one (one for a pool of one): the last is kept for the other tenants."""
    return max(1, workers - 1)


@dataclass(frozen=True)
class CpuSettings:
    workers: int
    tenant_share: int
    tenant_workers: int
    bulk_cost: int = BULK_COST

    @classmethod
    def from_env(cls, env: Env) -> CpuSettings:
        workers = env.integer("RATION_CPU_WORKERS", min(4, os.cpu_count() or 1), minimum=1)
        return cls(
            workers=workers,
            tenant_share=env.integer("RATION_CPU_TENANT_SHARE", 32, minimum=1),
            tenant_workers=env.integer(
                "RATION_CPU_TENANT_WORKERS", default_tenant_workers(workers), minimum=1
            ),
            bulk_cost=env.integer("RATION_CPU_BULK_CHARS", BULK_COST, minimum=0),
        )


@dataclass(eq=False)
class _Job:
    tenant: str
    work: Callable[[], Any]
    deadline: float | None
    future: asyncio.Future[Any]
    cost: int = 1
    started: bool = False
    kind: int = NORMAL  # NORMAL or BULK: which threads run it


@dataclass
class _Tenant:
    # Waiting and running jobs by kind (NORMAL, BULK).
    waiting: tuple[deque[_Job], deque[_Job]] = field(default_factory=lambda: (deque(), deque()))
    running: list[int] = field(default_factory=lambda: [0, 0])
    running_cost: int = 0  # the work (bytes) of its running jobs
    served: int = -1  # dispatch sequence number of this tenant's last started job

    @property
    def held(self) -> int:
        return sum(self.running) + sum(len(w) for w in self.waiting)


class CpuPool:
    """The process's one executor for CPU work; build once at start, `close` at shutdown."""

    def __init__(
        self,
        workers: int,
        tenant_share: int,
        clock: Callable[[], float] = time.monotonic,
        tenant_workers: int | None = None,
        bulk_cost: int = 0,
    ) -> None:
        self.workers = workers
        self.tenant_share = tenant_share
        self.tenant_workers = min(
            workers, default_tenant_workers(workers) if tenant_workers is None else tenant_workers
        )
        self.bulk_cost = bulk_cost  # 0: every job is a normal one
        self._clock = clock
        self._executors = (
            ThreadPoolExecutor(workers, thread_name_prefix="ration-cpu"),
            ThreadPoolExecutor(
                workers, thread_name_prefix="ration-cpu-bulk", initializer=_lower_priority
            ),
        )
        self._tenants: dict[str, _Tenant] = {}
        self._running = [0, 0]
        self._sequence = 0
        self._mean_seconds = 0.01  # running mean of job durations, for the RetryInfo delay

    @classmethod
    def from_settings(cls, settings: CpuSettings) -> CpuPool:
        return cls(
            settings.workers,
            settings.tenant_share,
            tenant_workers=settings.tenant_workers,
            bulk_cost=settings.bulk_cost,
        )

    def held(self, tenant: str) -> int:
        """Jobs of `tenant` running or waiting."""
        state = self._tenants.get(tenant)
        return 0 if state is None else state.held

    @property
    def waiting(self) -> int:
        return sum(len(w) for t in self._tenants.values() for w in t.waiting)

    async def run(
        self,
        tenant: str,
        fn: Callable[..., T],
        *args: Any,
        deadline: float | None | _CallDeadline = CALL_DEADLINE,
        cost: int = 1,
        admitted: bool = False,
    ) -> T:
        """`fn(*args)` on a worker thread, in this caller's contextvars, for `tenant`.

        `deadline` (time.monotonic() clock) defaults to the current RPC's; None means none,
        for work that outlives its caller by design. `cost`: the work the job does (bytes),
        what the pool is shared by. `admitted`: a later job of a call whose first job was
        admitted (not refused for the share again), which goes before the tenant's jobs of
        calls not yet started. Raises TENANT_BUSY when the tenant's
        share is taken and DEADLINE_EXCEEDED when the deadline passes before the job starts.
        """
        when = current_deadline() if isinstance(deadline, _CallDeadline) else deadline
        state = self._tenants.get(tenant)
        if not admitted and state is not None and state.held >= self.tenant_share:
            raise tenant_busy(self.tenant_share, self._retry_seconds(state))
        if when is not None and when <= self._clock():
            raise deadline_exceeded()
        state = self._tenants.setdefault(tenant, _Tenant())
        context = contextvars.copy_context()
        cost = max(1, cost)
        job = _Job(
            tenant,
            functools.partial(context.run, fn, *args),
            when,
            asyncio.get_running_loop().create_future(),
            cost,
            kind=BULK if self.bulk_cost and cost >= self.bulk_cost else NORMAL,
        )
        if admitted:
            state.waiting[job.kind].appendleft(job)
        else:
            state.waiting[job.kind].append(job)
        self._dispatch()
        try:
            return await job.future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            # The caller went away. A waiting job leaves the queue and never runs; a started
            # one finishes on its thread, its result dropped (its future is cancelled).
            if job in state.waiting[job.kind]:
                state.waiting[job.kind].remove(job)
                self._forget_if_idle(tenant)
            raise

    def _retry_seconds(self, state: _Tenant) -> float:
        """About when one of this tenant's jobs will have finished."""
        estimate = self._mean_seconds * max(1, state.held) / self.workers
        return round(min(MAX_RETRY_SECONDS, max(MIN_RETRY_SECONDS, estimate)), 3)

    def _next(self, kind: int) -> _Tenant | None:
        ready = [
            t
            for t in self._tenants.values()
            if t.waiting[kind] and t.running[kind] < self.tenant_workers
        ]
        return min(ready, key=lambda t: (t.running_cost, t.served), default=None)

    def _dispatch(self) -> None:
        for kind in (NORMAL, BULK):
            while self._running[kind] < self.workers:
                state = self._next(kind)
                if state is None:
                    break
                job = state.waiting[kind].popleft()
                if job.future.done():  # its caller was cancelled a moment ago: drop it
                    self._forget_if_idle(job.tenant)
                    continue
                if job.deadline is not None and job.deadline <= self._clock():
                    job.future.set_exception(deadline_exceeded())
                    self._forget_if_idle(job.tenant)
                    continue
                job.started = True
                state.running[kind] += 1
                state.running_cost += job.cost
                self._running[kind] += 1
                self._sequence += 1
                state.served = self._sequence
                started = self._clock()
                loop = asyncio.get_running_loop()
                done = loop.run_in_executor(self._executors[kind], job.work)
                done.add_done_callback(functools.partial(self._finished, job, state, started))

    def _finished(
        self, job: _Job, state: _Tenant, started: float, done: asyncio.Future[Any]
    ) -> None:
        state.running[job.kind] -= 1
        state.running_cost -= job.cost
        self._running[job.kind] -= 1
        self._mean_seconds += (self._clock() - started - self._mean_seconds) * 0.2
        if job.future.done():  # the caller was cancelled: nobody wants the result
            pass
        elif done.cancelled():
            job.future.cancel()
        elif (error := done.exception()) is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(done.result())
        self._forget_if_idle(job.tenant)
        # After the caller's own wake-up (scheduled by the result above), so a call with more
        # parts queues its next one first and the freed worker can go to it.
        asyncio.get_running_loop().call_soon(self._dispatch)

    def _forget_if_idle(self, tenant: str) -> None:
        state = self._tenants.get(tenant)
        if state is not None and state.held == 0:
            del self._tenants[tenant]

    def close(self) -> None:
        """Stops taking jobs; threads finish what they started."""
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
