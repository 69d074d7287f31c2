"""The event loop the processes run on: uvloop (libuv) unless RATION_EVENT_LOOP=asyncio.

A Reserve or Check spends about as much of its server CPU in the event loop's own machinery
(futures, callbacks, timers, the selector) as in ration's code, and uvloop does that part in
C: measured with `python -m bench.profile_server` (16 callers, 4 rounds), server CPU per RPC
fell 6 % for Reserve+Consume and 16 % for Check; the echo ceiling's stayed the same (grpc's own
work dominates it). grpc.aio runs on any asyncio loop. Windows has no uvloop: asyncio there.

Once a process serves, the objects its start made (modules, the tokenizer, the model, compiled
protobuf and SQL) live as long as it does; `settle_heap` moves them out of the garbage
collector's sight, so that a full collection scans what calls allocate, not the whole start.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

LOOP_VARIABLE = "RATION_EVENT_LOOP"
LOOPS = ("uvloop", "asyncio")


def loop_name(environ: dict[str, str] | None = None) -> str:
    """The loop this process runs: RATION_EVENT_LOOP if set (uvloop or asyncio), else uvloop
    where it is installed."""
    wanted = (os.environ if environ is None else environ).get(LOOP_VARIABLE, "").strip().lower()
    if wanted and wanted not in LOOPS:
        from servicekit.settings import SettingsError

        raise SettingsError(f"{LOOP_VARIABLE}={wanted!r} is invalid: expected uvloop or asyncio")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            from servicekit.settings import SettingsError

            raise SettingsError(f"{LOOP_VARIABLE}=uvloop: uvloop is not installed") from None
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on this process's loop (loop_name)."""
    if loop_name() == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


def settle_heap() -> None:
    """Collects, then freezes what survived (gc.freeze): the objects of the process's start are
    never scanned again. Called once every service of the process is SERVING. A full
    collection in a budget worker otherwise scanned the whole start, 15–66 ms with the event
    loop stopped (so every call in flight waited), a few times a minute under load; a memory
    worker's, with the model loaded, 123–231 ms; now at most a few ms (measured with
    gc.callbacks under the bench's noisy.hot_runs)."""
    gc.collect()
    gc.freeze()
    log.info("heap settled", extra={"frozen_objects": gc.get_freeze_count()})
