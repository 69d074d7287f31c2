"""The installed `ration` command prints the release too (DESIGN 6; a process of its own)."""

from __future__ import annotations

import subprocess

import pytest

from ration_server import __version__
from tests.support.procs import BIN

pytestmark = pytest.mark.system


def test_the_installed_command_prints_it_too() -> None:
    done = subprocess.run(
        [str(BIN / "ration"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, f"ration {__version__}\n")
