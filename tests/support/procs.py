"""Service processes for system tests: started as users start them, read, signalled, reaped."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import dbroles

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
ADDRESS = re.compile(r"^(\w+)_service: grpc (\S+)\s+metrics (\S+)")


def clean_env(**overrides: str) -> dict[str, str]:
    """The environment of a service process. A database of the test server given as
    DATABASE_URL or RATION_DATABASE_URL is handed over as users deploy it: the services connect
    as the session's application role and migrate as its owner (tests/support/dbroles.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RATION_DATABASE_URL")}
    env.update(
        RATION_BUDGET_LISTEN="127.0.0.1:0",
        RATION_BUDGET_METRICS_LISTEN="127.0.0.1:0",
        RATION_MEMORY_LISTEN="127.0.0.1:0",
        RATION_MEMORY_METRICS_LISTEN="127.0.0.1:0",
        RATION_SHUTDOWN_GRACE_MS="500",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    roles = dbroles.CURRENT
    for name in ("DATABASE_URL", "RATION_DATABASE_URL"):
        url = env.get(name)
        if url and roles is not None and roles.on_this_server(url):
            del env[name]
            env.update(roles.service_env(url))
    return env


@dataclass
class Proc:
    """A process group we own; its stdout is read line by line until a marker appears."""

    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    pending: queue.Queue[str | None] = field(default_factory=queue.Queue)
    errors: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str]) -> Proc:
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        proc = cls(popen)
        threading.Thread(target=proc._pump, daemon=True).start()
        threading.Thread(target=proc._drain, daemon=True).start()
        return proc

    def _drain(self) -> None:
        # Always read stderr: a server that logs a lot would block on a full pipe otherwise.
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.errors.append(line)

    def _pump(self) -> None:
        # A thread, not select(): text-mode readline buffers lines that select() cannot see.
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.pending.put(line)
        self.pending.put(None)

    def rest_of_stdout(self, timeout: float = 30) -> list[str]:
        out = []
        while (line := self.pending.get(timeout=timeout)) is not None:
            out.append(line.rstrip("\n"))
        return out

    def wait_for(self, marker: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.pending.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self.pending.put(None)
                break
            self.lines.append(line.rstrip("\n"))
            match = ADDRESS.match(line)
            if match:
                self.addresses[match[1]] = match[2]
                self.metrics[match[1]] = match[3]
            if marker in line:
                return
        raise AssertionError(
            f"{marker!r} not seen; stdout={self.lines} stderr={self.stderr_tail()}"
        )

    def wait_for_stderr(self, marker: str, timeout: float = 120) -> None:
        """Until a stderr line (read by the drain thread) contains `marker`."""
        deadline = time.monotonic() + timeout
        while not any(marker in line for line in self.errors):
            if time.monotonic() > deadline or self.popen.poll() is not None:
                raise AssertionError(f"{marker!r} not in stderr: {self.stderr_tail()}")
            time.sleep(0.02)

    def stderr_tail(self) -> str:
        if self.popen.poll() is None:
            return "".join(self.errors[-40:])[-3000:] or "(running)"
        time.sleep(0.2)  # let the drain thread read the last lines
        return "".join(self.errors)

    def send(self, sig: int = signal.SIGINT) -> None:
        os.killpg(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.send(sig)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            raise


@contextlib.contextmanager
def embedded_data_dir() -> Iterator[Path]:
    """A data directory for an embedded Postgres, outside pytest's basetemp: as root, pgserver
    runs postgres as an unprivileged user that must reach it, and every pytest run (other
    sessions too) makes /tmp/pytest-of-<user> private again. Anything left is killed."""
    parent = Path(tempfile.mkdtemp(prefix="ration-pg-"))
    path = parent / "pgdata"
    try:
        yield path
    finally:
        kill_processes_mentioning(str(path))  # only after a failure is anything left
        shutil.rmtree(parent, ignore_errors=True)


def kill_processes_mentioning(text: str) -> None:
    """Cleanup after a failed test: SIGKILL what processes_mentioning(text) finds."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (e.g. a data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found
