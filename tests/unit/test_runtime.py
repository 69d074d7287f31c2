"""servicekit/runtime.py: the processes' event loop, uvloop unless RATION_EVENT_LOOP says."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from servicekit import runtime
from servicekit.settings import SettingsError


def test_uvloop_by_default_and_asyncio_on_request() -> None:
    assert runtime.loop_name({}) == "uvloop"
    assert runtime.loop_name({"RATION_EVENT_LOOP": "asyncio"}) == "asyncio"
    assert runtime.loop_name({"RATION_EVENT_LOOP": " UVLOOP "}) == "uvloop"


def test_an_unknown_loop_is_a_configuration_error() -> None:
    with pytest.raises(SettingsError, match="RATION_EVENT_LOOP='trio' is invalid"):
        runtime.loop_name({"RATION_EVENT_LOOP": "trio"})


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_runs_the_coroutine_on_the_chosen_loop(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATION_EVENT_LOOP", name)

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    module = runtime.run(which())
    assert module.startswith("uvloop") == (name == "uvloop")


def test_settle_heap_freezes_what_the_start_made() -> None:
    """In a process of its own (freezing is process-wide): after the imports of a service,
    settle_heap leaves the collector almost nothing of them to scan."""
    probe = (
        "import gc, budget_service.definition, memory_service.definition\n"
        "from servicekit import runtime\n"
        "before = len(gc.get_objects())\n"
        "runtime.settle_heap()\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    before, frozen, scanned = map(int, done.stdout.split())
    assert frozen > before / 2
    assert scanned < before / 20
