"""The Postgres server for a bench run, and a fresh database on it that is dropped at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from servicekit import pgroles

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Server:
    """Where the bench database lives; `bin_dir` holds a matching pgbench when known."""

    url: str
    source: str
    bin_dir: Path | None = None


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database (host and socket URLs alike)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def _answers(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


async def admin(url: str, *statements: str) -> list[str]:
    """Runs statements outside a transaction; returns the first column of the last one."""
    conn = await asyncpg.connect(url)
    try:
        rows: list[str] = []
        for statement in statements:
            rows = [str(r[0]) for r in await conn.fetch(statement)]
        return rows
    finally:
        await conn.close()


def _system_bin_dir() -> Path | None:
    """The newest PostgreSQL installed by the system packages (Debian's layout), if any."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnCluster:
    """A throwaway cluster of the bench's own, so that the Postgres CPU it reports is only the
    bench's: initdb with the system's binaries into a temporary directory (as the `postgres`
    user when run as root: initdb refuses root), on a free loopback port, removed at the end."""

    SETTINGS = ("max_connections=200", "listen_addresses=127.0.0.1", "fsync=on")

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="ration-bench-cluster-"))
        self.data = self.root / "data"
        self.port = _free_port()

    def _run(self, *argv: str) -> None:
        prefix: list[str] = []
        if os.geteuid() == 0:
            prefix = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> str:
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        options = " ".join(f"-c {s}" for s in (*self.SETTINGS, f"port={self.port}"))
        options += f" -c unix_socket_directories={self.root}"
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "start",
        )
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(shared: bool = False) -> Iterator[Server]:
    """The bench's own throwaway cluster (system binaries, else embedded pgserver), so Postgres
    CPU counts only the bench's work. BENCH_DATABASE_URL, or `shared` (the local server on 5432)
    measure a server other clients may use too: its CPU figure then includes theirs."""
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        yield Server(url, "BENCH_DATABASE_URL (shared: its CPU includes other clients)")
        return
    if shared and asyncio.run(_answers(LOCAL_URL)):
        yield Server(LOCAL_URL, "shared local server 127.0.0.1:5432 (CPU includes other clients)")
        return
    bin_dir = _system_bin_dir()
    if bin_dir is not None:
        cluster = OwnCluster(bin_dir)
        try:
            yield Server(cluster.start(), f"own cluster ({bin_dir.parent.name}, initdb)", bin_dir)
        finally:
            cluster.stop()
        return
    from servicekit.embedded import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix="ration-bench-pg-"))
    embedded = EmbeddedPostgres(data_dir)
    try:
        import pgserver

        bin_dir = Path(pgserver.__file__).parent / "pginstall" / "bin"
        yield Server(embedded.start(), "own cluster (embedded pgserver)", bin_dir)
    finally:
        embedded.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def with_user(url: str, user: str, password: str) -> str:
    """The same server and database as another user (host and socket URLs alike)."""
    parts = urlsplit(url)
    netloc = f"{user}:{password}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class BenchDatabase:
    """The bench database: `url` as the server's superuser (pgbench, VACUUM), and the two roles
    the services run with, as deployed (README, Postgres roles)."""

    url: str
    owner_url: str
    app_url: str

    def service_env(self) -> dict[str, str]:
        """The services connect as the application role and migrate as the owner."""
        return {"RATION_DATABASE_URL": self.app_url, "RATION_MIGRATE_DATABASE_URL": self.owner_url}


@contextlib.contextmanager
def bench_database(server: Server) -> Iterator[BenchDatabase]:
    """CREATE DATABASE ration_bench_<hex> owned by a fresh owner role, with a fresh application
    role (the operator's SQL, servicekit/pgroles.py); DROP DATABASE … WITH (FORCE) and both roles
    after. Role names are unique per run: roles are cluster-wide."""
    tag = secrets.token_hex(6)
    name, owner, app, password = f"ration_bench_{tag}", f"rb_own_{tag}", f"rb_app_{tag}", tag
    url = with_database(server.url, name)
    asyncio.run(admin(server.url, *pgroles.role_statements(owner, app, password, password)))
    try:
        asyncio.run(admin(server.url, pgroles.database_statement(name, owner)))
        try:
            asyncio.run(admin(url, *pgroles.database_statements(owner, app)))
            yield BenchDatabase(url, with_user(url, owner, password), with_user(url, app, password))
        finally:
            asyncio.run(admin(server.url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        asyncio.run(
            admin(server.url, f'DROP ROLE IF EXISTS "{app}"', f'DROP ROLE IF EXISTS "{owner}"')
        )


def no_autovacuum(schema: str) -> str:
    """Autovacuum off on every table of `schema` of the (throwaway) bench database: figures
    that must not depend on statistics are then measured without any, deterministically."""
    return (
        "DO $$ DECLARE t text; BEGIN FOR t IN SELECT tablename FROM pg_tables"
        f" WHERE schemaname = '{schema}' LOOP EXECUTE format("
        f"'ALTER TABLE {schema}.%I SET (autovacuum_enabled = off)', t); END LOOP; END $$"
    )


def server_version(url: str) -> str:
    return asyncio.run(admin(url, "SELECT version()"))[0]


def max_connections(url: str) -> int:
    return int(asyncio.run(admin(url, "SHOW max_connections"))[0])


async def _postmaster_facts(url: str) -> tuple[int | None, float]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer' LIMIT 1),"
            " extract(epoch FROM pg_postmaster_start_time())::float8"
        )
    finally:
        await conn.close()
    assert row is not None
    return row[0], float(row[1])


def postmaster_facts(url: str) -> tuple[int | None, float]:
    """The checkpointer's pid as the server sees it (a child of the postmaster that lives as long
    as the cluster) and when the postmaster started, in seconds since the epoch."""
    return asyncio.run(_postmaster_facts(url))
