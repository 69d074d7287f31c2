"""The supervisor of RATION_WORKERS > 1 runs the worker command its caller gives (processes)."""

from __future__ import annotations

import signal
import sys

import pytest

from servicekit.workers import supervise

pytestmark = pytest.mark.system


class _NeverStopped:
    requested = False


def test_the_supervisor_starts_the_command_its_caller_gives() -> None:
    code = "import os, sys; sys.exit(int(os.environ['RATION_WORKERS']) + 6)"
    # The first worker to exit makes the supervisor SIGTERM the other (a failed worker stops
    # all); born ignoring SIGTERM (a disposition exec keeps), each exits with its own code.
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert (
            supervise(
                [sys.executable, "-c", code], "budget", 2, "postgresql://x/y", _NeverStopped()
            )
            == 7
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
