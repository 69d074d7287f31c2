"""Multi-process grpc.aio load generator: C callers over P spawned processes, bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from typing import Any

import grpc

from bench.caller import Caller, Op, Tally, backoff, describe, unavailable
from bench.meter import Meter, Snapshot
from bench.stats import Histogram, summary_ms

Builder = Callable[[Sequence[grpc.aio.Channel], Mapping[str, Any], int], Op]

# Scenario name -> "module:builder"; children import only the module they need.
SCENARIOS = {
    "echo": "bench.echo:echo_op",
    "budget.pairs": "bench.budget:pair_op",
    "budget.check": "bench.budget:check_op",
    "budget.report": "bench.budget:report_op",
    "memory.append": "bench.memory:append_op",
    "memory.list": "bench.memory:list_op",
    "memory.append_big": "bench.memory:big_append_op",
}
MAX_CONSECUTIVE_ERRORS = 200


@dataclass(frozen=True)
class LoadSpec:
    """One measurement: which scenario, against what, how many callers, for how long."""

    scenario: str
    target: str
    params: Mapping[str, Any] = field(default_factory=dict)
    processes: int = 2
    concurrency: int = 64
    duration: float = 8.0
    warmup: float = 1.0
    channels_per_process: int = 8
    max_ops: int | None = None
    timeout: float = 30.0
    rpcs_per_op: int = 1
    # Niceness of the load processes (os.nice): the noisy neighbour's clients run at 10, as if
    # on machines of their own (bench/noisy_flow.py).
    nice: int = 0


@dataclass
class LoadResult:
    """The merged measurement of all processes."""

    spec: LoadSpec
    tally: Tally
    ops_per_s: float
    rpcs_per_s: float
    # Taken by the parent when the measured window opened and when it closed (or when every
    # process was done, if earlier): the CPU of the figure (bench/meter.py).
    marks: tuple[Snapshot, Snapshot] | None = None

    def figure(self) -> dict[str, Any]:
        """The JSON form used by reports: rates, per-RPC and per-operation latency, errors."""
        tally = self.tally
        out: dict[str, Any] = {
            "scenario": self.spec.scenario,
            "processes": self.spec.processes,
            "concurrency": self.spec.concurrency,
            "duration_s": self.spec.duration,
        }
        if tally.unavailable is not None:
            return {**out, "status": "not available", "reason": tally.unavailable}
        if tally.failure is not None:
            return {**out, "status": "failed", "reason": tally.failure}
        if tally.rpcs.count == 0:
            reason = "no successful RPC" + (f" (errors {tally.errors})" if tally.errors else "")
            return {**out, "status": "failed", "reason": reason, "errors": tally.errors}
        out.update(
            status="ok",
            rpcs=tally.rpcs.count,
            ops=tally.ops.count,
            rpc_per_s=round(self.rpcs_per_s, 1),
            ops_per_s=round(self.ops_per_s, 1),
            **summary_ms(tally.rpcs),
            errors=tally.errors,
            methods={
                name: {"count": h.count, **summary_ms(h)} for name, h in tally.methods.items()
            },
        )
        if self.spec.rpcs_per_op != 1 and tally.ops.count:
            op = summary_ms(tally.ops)
            out.update(op_p50_ms=op["p50_ms"], op_p99_ms=op["p99_ms"])
        return out


def resolve(scenario: str) -> Builder:
    module, _, name = SCENARIOS[scenario].partition(":")
    builder: Builder = getattr(importlib.import_module(module), name)
    return builder


def split(total: int, parts: int) -> list[int]:
    """`total` spread over `parts` as evenly as possible (larger shares first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def _caller_loop(op: Op, caller: Caller, quota: list[float], stop: asyncio.Event) -> None:
    """Runs `op` back to back until the window ends, the quota is used or the figure stops."""
    start_at, end_at = caller.window
    tally = caller.tally
    consecutive = 0
    while not stop.is_set() and quota[0] > 0 and (now := time.monotonic()) < end_at:
        caller.recording = now >= start_at
        try:
            await op(caller)
        except grpc.aio.AioRpcError as error:
            reason = unavailable(error)
            if reason is not None:
                tally.unavailable = reason
                stop.set()
                return
            if caller.recording:
                key = describe(error)
                tally.errors[key] = tally.errors.get(key, 0) + 1
            pause = backoff(error)
            if pause is not None:  # throttled, not broken: wait as told, then go on
                await asyncio.sleep(min(pause, max(0.0, end_at - time.monotonic())))
                continue
            consecutive += 1
            if consecutive >= MAX_CONSECUTIVE_ERRORS:
                tally.failure = f"{consecutive} consecutive errors, last {describe(error)}"
                stop.set()
                return
            continue
        consecutive = 0
        done = time.monotonic()
        tally.completed(done, caller.window, rpcs=False)
        if caller.recording:
            tally.ops.record(done - now)
            quota[0] -= 1


async def _run_process(
    spec: LoadSpec, index: int, callers: Sequence[int], ready: Any, go: Event, start: Any
) -> Tally:
    build = resolve(spec.scenario)
    channels = [
        grpc.aio.insecure_channel(
            spec.target,
            options=[("grpc.use_local_subchannel_pool", 1), ("bench.channel", n)],
        )
        for n in range(spec.channels_per_process)
    ]
    tally = Tally()
    try:
        await asyncio.gather(*(ch.channel_ready() for ch in channels))
        ops = [build(channels, spec.params, i) for i in callers]
        ready.put(("ready", index, None))
        await asyncio.to_thread(go.wait)
        await asyncio.sleep(max(0.0, start.value - time.monotonic()))  # every process together
        start_at = start.value + spec.warmup
        window = (start_at, start_at + spec.duration)
        quota: list[float] = [
            math.inf if spec.max_ops is None else split(spec.max_ops, spec.processes)[index]
        ]
        stop = asyncio.Event()
        await asyncio.gather(
            *(
                _caller_loop(op, Caller(i, tally, spec.timeout, window), quota, stop)
                for op, i in zip(ops, callers, strict=True)
            )
        )
        tally.elapsed = max(tally.last_in_window - start_at, 0.0)
    finally:
        await asyncio.gather(*(ch.close() for ch in channels))
    return tally


def _child(
    spec: LoadSpec, index: int, callers: Sequence[int], ready: Any, go: Event, start: Any
) -> None:
    try:
        if spec.nice:
            os.nice(spec.nice)
        tally = asyncio.run(_run_process(spec, index, callers, ready, go, start))
        ready.put(("done", index, tally))
    except BaseException:  # report everything, including setup failures, to the parent
        ready.put(("error", index, traceback.format_exc()))


def _merge(spec: LoadSpec, tallies: Sequence[Tally]) -> LoadResult:
    merged = Tally()
    ops_rate = rpc_rate = 0.0
    for tally in tallies:
        merged.ops.merge(tally.ops)
        merged.rpcs.merge(tally.rpcs)
        for name, hist in tally.methods.items():
            merged.methods.setdefault(name, Histogram()).merge(hist)
        for key, n in tally.errors.items():
            merged.errors[key] = merged.errors.get(key, 0) + n
        merged.window_ops += tally.window_ops
        merged.window_rpcs += tally.window_rpcs
        merged.unavailable = merged.unavailable or tally.unavailable
        merged.failure = merged.failure or tally.failure
        if tally.elapsed > 0:
            ops_rate += tally.window_ops / tally.elapsed
            rpc_rate += tally.window_rpcs / tally.elapsed
    return LoadResult(spec, merged, ops_rate, rpc_rate)


class LoadRun:
    """One spec's load processes: spawned and connected, then started at a given moment, then
    collected. Several runs may overlap (the noisy-neighbour figures start tenant A's load, then
    tenant B's inside it); `run_load` is one run alone."""

    def __init__(self, spec: LoadSpec) -> None:
        processes = max(1, min(spec.processes, spec.concurrency))
        self.spec = LoadSpec(**{**spec.__dict__, "processes": processes})
        ctx = mp.get_context("spawn")
        self._ready: Any = ctx.Queue()
        self._go = ctx.Event()
        self._start: Any = ctx.Value("d", 0.0)
        shares = split(self.spec.concurrency, processes)
        offsets = [sum(shares[:i]) for i in range(processes)]
        self._children = [
            ctx.Process(
                target=_child,
                args=(
                    self.spec,
                    i,
                    range(offsets[i], offsets[i] + shares[i]),
                    self._ready,
                    self._go,
                    self._start,
                ),
                daemon=True,
            )
            for i in range(processes)
        ]
        self._tallies: list[Tally] = []
        for child in self._children:
            child.start()

    def wait_ready(self) -> None:
        """Until every process has connected its channels and built its callers."""
        _collect(self._ready, len(self._children), "ready", 120.0, self._tallies)

    def go(self, at: float) -> None:
        """Every process starts its callers at `at` (time.monotonic); the window opens after
        the spec's warm-up."""
        self._start.value = at
        self._go.set()

    @property
    def opens(self) -> float:
        return float(self._start.value) + self.spec.warmup

    def finish(self, meter: Meter | None = None) -> LoadResult:
        """Waits for the window and the processes' tallies, and merges them; with a meter,
        takes its snapshots as the window opens and closes."""
        spec, n = self.spec, len(self._children)
        deadline = self.opens + spec.duration + 120.0
        marks = None
        if meter is not None:
            pids = [child.pid for child in self._children if child.pid is not None]
            time.sleep(max(0.0, self.opens - time.monotonic()))
            first = meter.snapshot(pids)
            # Until the window closes or every process is done (a quota can end it early);
            # a process that is done has not been joined yet, so its times are still there.
            closes = self.opens + spec.duration - time.monotonic()
            _collect(self._ready, n, "done", closes, self._tallies, early=True)
            marks = (first, meter.snapshot(pids))
        _collect(self._ready, n, "done", deadline - time.monotonic(), self._tallies)
        result = _merge(spec, self._tallies)
        result.marks = marks
        return result

    def close(self) -> None:
        for child in self._children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()

    def __enter__(self) -> LoadRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_load(spec: LoadSpec, meter: Meter | None = None) -> LoadResult:
    """Spawns the processes, starts them together, waits for the window, merges their tallies;
    with a meter, takes its snapshots as the window opens and closes."""
    with LoadRun(spec) as run:
        run.wait_ready()
        run.go(time.monotonic() + 0.05)
        return run.finish(meter)


def run_together(plan: Sequence[tuple[LoadSpec, float]]) -> list[LoadResult]:
    """Several loads at once, each (spec, offset): every process of every spec connected
    first, then each spec starts `offset` seconds after the first moment (its warm-up and
    window follow), e.g. tenant A's noise at 0 and tenant B's measured calls at 1 s, inside
    it. Results in the order of `plan`."""
    with contextlib.ExitStack() as stack:
        runs = [stack.enter_context(LoadRun(spec)) for spec, _ in plan]
        for run in runs:
            run.wait_ready()
        began = time.monotonic() + 0.05
        for run, (_, offset) in zip(runs, plan, strict=True):
            run.go(began + offset)
        return [run.finish() for run in runs]


def _collect(
    ready: Any, n: int, kind: str, timeout: float, tallies: list[Tally], early: bool = False
) -> None:
    """Waits for `n` processes in all to report `kind` (those already in `tallies` count);
    `early`: stop waiting at the timeout instead of failing."""
    deadline = time.monotonic() + timeout
    seen = len(tallies) if kind == "done" else 0
    while seen < n:
        left = deadline - time.monotonic()
        try:
            what, index, payload = ready.get(timeout=max(0.001 if early else 0.1, left))
        except queue.Empty:
            if early:
                return
            raise TimeoutError(f"load processes: {seen}/{n} reported {kind!r}") from None
        if what == "error":
            raise RuntimeError(f"load process {index} failed:\n{payload}")
        if what == kind:
            seen += 1
            if payload is not None:
                tallies.append(payload)
