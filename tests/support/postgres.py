"""Postgres for tests: server URLs, admin statements, cloned databases, a restartable server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database (works for host and socket URLs)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def lock_waiters(db: asyncpg.Connection, *, waited_ms: int = 0) -> int:
    """Sessions of this database (but `db`'s) waiting for a lock now, for at least `waited_ms`.
    pg_stat_activity is read once per transaction and kept, so the snapshot is cleared first:
    polled inside a transaction, it would otherwise answer what it saw the first time."""
    await db.execute("SELECT pg_stat_clear_snapshot()")
    return int(
        await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            " AND clock_timestamp() - query_start >= make_interval(secs => $1::float8 / 1000)",
            waited_ms,
        )
    )


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


async def admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def cloned_database(pg_server_url: str, template: str, prefix: str = "ration_m") -> Iterator[str]:
    """A migrated database for a whole module (the per-test `database_url` lives one test)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    asyncio.run(admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    try:
        yield with_database(pg_server_url, name)
    finally:
        asyncio.run(admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class RestartablePostgres:
    """pgserver in a directory of our own: `stop_fast` is `pg_ctl stop -m fast` (clients are
    disconnected at once) and `start_again` brings the same data directory back on the same
    socket, so the services' URL stays valid. The machine's shared Postgres is never touched."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None
        self._socket_dir: Path | None = None

    def start(self) -> str:
        import pgserver

        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o755)  # pgserver runs postgres unprivileged when we are root
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        self._socket_dir = self._server.get_postmaster_info().socket_dir
        return str(self._server.get_uri())

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import POSTGRES_BIN_PATH

        argv = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data_dir), *args]
        if self._server.system_user is not None:
            argv = ["runuser", "-u", self._server.system_user, "--", *argv]
        # No user= argument, so subprocess can vfork: a plain fork of a process whose gRPC
        # threads are busy may crash the child before it execs.
        subprocess.run(
            argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60
        )

    def stop_fast(self) -> None:
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start_again(self) -> None:
        """The same data directory on the same socket directory, so the URL stays valid."""
        self._pg_ctl(
            "-w",
            "-o",
            '-h ""',
            "-o",
            f"-k {self._socket_dir}",
            "-l",
            str(self.data_dir / "log"),
            "start",
        )

    def close(self) -> None:
        """Stops the server (pgserver's own cleanup only knows the first postmaster)."""
        if self._server is not None:
            with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
                self.stop_fast()
            server, self._server = self._server, None
            with contextlib.suppress(Exception):
                server.cleanup()
