"""Embedded PostgreSQL (pgserver, a pip-installed server) for machines without a database."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# pgserver's record of the processes holding the server: the last one to leave stops it.
HANDLES = ".handle_pids.json"
STOP_WAIT_SECONDS = 15.0


class EmbeddedPostgresError(RuntimeError):
    """The embedded server did not start; the message says where its log is."""


class EmbeddedPostgres:
    """One handle on a pgserver data directory; the server stops when the last handle closes.

    pgserver counts handles by pid in `HANDLES`; a process killed with SIGKILL never removes
    its pid, and then no later run would ever be the last. So starting forgets the pids of dead
    processes, and stopping checks that the server is really gone (and stops it when no live
    handle remains, also after a start that was interrupted)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None
        self._attempted = False

    def start(self) -> str:
        """Starts (or joins) the server and returns its connection URL."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (a container, sudo) and falls
            # back to /tmp, which suits pgserver's lock file.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import pgserver  # imported lazily: only the embedded path needs it

        # pgserver creates the data directory itself (initdb wants it private, 0700) and, when we
        # are root, hands it to an unprivileged user; only the parent must exist.
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._attempted = True
        self.forget_dead_handles()
        self._drop_stale_pid_file()
        try:
            self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        except Exception as exc:  # pgserver raises whatever initdb or pg_ctl made of it
            raise EmbeddedPostgresError(
                f"the embedded postgres in {self.data_dir} did not start ({exc!r:.200}); "
                f"its log: {self.data_dir / 'log'}"
            ) from exc
        url = str(self._server.get_uri())
        log.info("embedded postgres started", extra={"data_dir": str(self.data_dir)})
        return url

    def forget_dead_handles(self) -> list[int]:
        """Removes the pids of processes that no longer run from pgserver's handle list."""
        from pgserver.postgres_server import PostgresServer
        from pgserver.utils import DiskList

        handles = DiskList(self.data_dir / HANDLES)
        with PostgresServer._lock:  # the inter-process lock pgserver takes around the list
            pids = handles.get()
            dead = [pid for pid in pids if pid != os.getpid() and not _alive(pid)]
            if dead:
                handles.put([pid for pid in pids if pid not in dead])
        if dead:
            log.info(
                "embedded postgres: forgot handles of dead processes",
                extra={"pids": dead, "data_dir": str(self.data_dir)},
            )
        return dead

    def _drop_stale_pid_file(self) -> None:
        """A postmaster that died while starting leaves a postmaster.pid that pgserver cannot
        parse (its status line is missing); postgres itself would ignore a stale one."""
        pid_file = self.data_dir / "postmaster.pid"
        if pid_file.exists() and self.postmaster_pid() is None:
            pid_file.unlink(missing_ok=True)
            log.info("embedded postgres: removed a stale postmaster.pid")

    def stop(self) -> bool:
        """Leaves the server; True when it is gone or others still hold it, False (logged as an
        error) when it runs on with nobody holding it."""
        server, self._server = self._server, None
        if server is not None:
            server.cleanup()
        if not self._attempted:
            return True
        self._attempted = False
        if not self.data_dir.exists():
            return True
        self.forget_dead_handles()
        from pgserver.utils import DiskList

        others = DiskList(self.data_dir / HANDLES).get()
        pid = self.postmaster_pid()
        if pid is not None and others:
            log.info(
                "embedded postgres left running for other processes",
                extra={"pid": pid, "holders": others, "data_dir": str(self.data_dir)},
            )
            return True
        if pid is not None:
            # Nobody holds it (an interrupted start, or a handle pgserver lost): stop it here.
            _stop_postmaster(pid)
            pid = self.postmaster_pid()
        if pid is not None:
            log.error(
                "embedded postgres is still running",
                extra={"pid": pid, "data_dir": str(self.data_dir)},
            )
            return False
        log.info("embedded postgres stopped", extra={"data_dir": str(self.data_dir)})
        return True

    def postmaster_pid(self) -> int | None:
        """The pid of the postmaster running on this data directory, if one runs."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except (OSError, ValueError):
            return None
        pid = int(first) if first.strip().isdigit() else 0
        return pid if pid > 0 and _alive(pid) else None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child its parent has not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _stop_postmaster(pid: int) -> None:
    """Fast shutdown (SIGINT), then immediate (SIGQUIT) if it does not finish in time."""
    for sig, wait in ((signal.SIGINT, STOP_WAIT_SECONDS), (signal.SIGQUIT, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _alive(pid):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        else:
            return
