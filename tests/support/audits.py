"""Helpers of the fault, fuzz and soak tests: a restartable embedded Postgres, health polling,
replica failover, write fingerprints, in-process servers on their own thread, and the audits
that end every fault and soak test (ledger, balances, events and holds; revision chains and
manifest bytes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pgroles
from budget_support import assert_ledger_matches_balances
from conftest import _admin, service_env, with_database
from grpc_health.v1 import health_pb2, health_pb2_grpc
from memory_support import materialise

from ration_server import registry
from servicekit.server import ServiceRunner

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNREACHABLE = -1  # no answer at all (the process is gone or not listening yet)

# Column suffixes of the four budget dimensions, and their names in ledger `resume` details.
SUFFIXES = ("tokens", "cost_nanos", "tool_calls", "retries")
DIMENSION_NAMES = {
    "tokens": "tokens",
    "cost": "cost_nanos",
    "toolCalls": "tool_calls",
    "retries": "retries",
}


# --- an embedded Postgres that a test may stop and start --------------------------------------


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


# --- health ----------------------------------------------------------------------------------


async def health_status(channel: grpc.aio.Channel, seconds: float = 1.0) -> int:
    """The server's overall health status, or UNREACHABLE."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=seconds)
    except grpc.aio.AioRpcError:
        return UNREACHABLE
    return int(reply.status)


@dataclass
class HealthWatch:
    """Polls a server's health and keeps the sequence of distinct statuses it reported."""

    address: str
    interval: float = 0.05
    seen: list[int] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            while True:
                status = await health_status(channel)
                if not self.seen or self.seen[-1] != status:
                    self.seen.append(status)
                await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def wait_for(self, status: int, within: float) -> None:
        """Until the latest status is `status`; fails with the history after `within` s."""
        deadline = time.monotonic() + within
        while not (self.seen and self.seen[-1] == status):
            assert time.monotonic() < deadline, f"health never became {status}: {self.seen}"
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# --- replicas ----------------------------------------------------------------------------------

RETRY_ELSEWHERE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Replicas:
    """Stubs on every replica; `call` sends the same request (so the same request_id) to the
    next replica when one answers UNAVAILABLE, as the real client does."""

    def __init__(self, addresses: Sequence[str], stub_type: Callable[[grpc.aio.Channel], Any]):
        self.channels = [grpc.aio.insecure_channel(a) for a in addresses]
        self.stubs = [stub_type(c) for c in self.channels]
        self.dead: set[int] = set()
        self.failovers = 0

    async def call(
        self, prefer: int, method: str, request: Any, *, seconds: float = 10, attempts: int = 8
    ) -> Any:
        last: grpc.aio.AioRpcError | None = None
        for attempt in range(attempts):
            order = [prefer % len(self.stubs), *range(len(self.stubs))]
            for index in dict.fromkeys(order):
                if index in self.dead:
                    continue
                try:
                    return await getattr(self.stubs[index], method)(request, timeout=seconds)
                except grpc.aio.AioRpcError as error:
                    if error.code() not in RETRY_ELSEWHERE:
                        raise
                    last = error
                    self.failovers += 1
            await asyncio.sleep(0.05 * (attempt + 1))
        assert last is not None
        raise last

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


# --- fingerprints: did a call write anything? ----------------------------------------------------


async def fingerprint(conn: asyncpg.Connection, schema: str) -> dict[str, tuple[int, int]]:
    """Per table of `schema`: row count and a sum of row hashes, so that any insert, update or
    delete changes it (the tables are read from the catalog, so new migrations are covered)."""
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name",
        schema,
    )
    parts = [
        f"SELECT '{name}' AS name, count(*) AS n, coalesce(sum(hashtext(x::text)::bigint), 0)"
        f' AS h FROM "{schema}"."{name}" x'
        for name in (t["table_name"] for t in tables)
    ]
    rows = await conn.fetch(" UNION ALL ".join(parts))
    return {r["name"]: (r["n"], r["h"]) for r in rows}


def changed_tables(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    return sorted(name for name in after if before.get(name) != after[name])


# --- databases and in-process servers with a module's lifetime ---------------------------------


@contextlib.contextmanager
def cloned_database(pg_server_url: str, template: str, prefix: str = "ration_m") -> Iterator[str]:
    """A migrated database for a whole module (the per-test `database_url` lives one test)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    try:
        yield with_database(pg_server_url, name)
    finally:
        asyncio.run(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def build_runner(kind: str, database_url: str, **overrides: str) -> ServiceRunner:
    """A ServiceRunner for 'budget' or 'memory', configured as the `start_server` fixture does:
    connected as the session's application role."""
    database_url = pgroles.current().app_url(database_url)
    return registry.build_runner(kind, service_env(database_url, **overrides), database_url)


class ThreadedServer:
    """A real in-process server on its own event loop and thread, so one server can outlive the
    per-test event loops of a whole module."""

    def __init__(self, kind: str, database_url: str, **overrides: str) -> None:
        self._build = lambda: build_runner(kind, database_url, **overrides)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.runner: ServiceRunner | None = None

    @property
    def address(self) -> str:
        assert self.runner is not None
        return f"127.0.0.1:{self.runner.port}"

    def _run(self, work: Awaitable[Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)  # type: ignore[arg-type]

    def start(self) -> ThreadedServer:
        self._thread.start()

        async def start() -> ServiceRunner:
            runner = self._build()
            await runner.start()
            await asyncio.wait_for(runner.ready.wait(), timeout=60)
            return runner

        self.runner = self._run(start(), 90)
        return self

    def stop(self) -> None:
        if self.runner is not None:
            self._run(self.runner.stop(), 30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


# --- budget audit ---------------------------------------------------------------------------


@dataclass
class _Balance:
    """One run or pool row while the ledger is replayed."""

    limits: dict[str, int | None]
    consumed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUFFIXES, 0))
    open_holds: dict[str, tuple[dict[str, int], datetime]] = field(default_factory=dict)


def _pool_keys(pools_json: Any) -> list[tuple[str, str, str]]:
    pools = json.loads(pools_json) if isinstance(pools_json, str) else pools_json
    return [
        (p["scope"], p["scope_id"], datetime.fromisoformat(p["window_start"]).isoformat())
        for p in pools or []
    ]


async def audit_budget(conn: asyncpg.Connection) -> dict[str, int]:
    """Everything DESIGN 3.7 promises, read back from the tables after a load:

    - the ledger's deltas sum to every run's and every pool's consumed and held, and held equals
      the open holds (budget_support.assert_ledger_matches_balances);
    - every run's events are numbered 1..n without gaps, and next_seq is n + 1;
    - every hold was granted by exactly one ledger row, and ended at most once: an ended hold by
      exactly one ledger row whose decision matches its state, an open one by none;
    - replaying the ledger in order, every grant left consumed + held <= limit, in every
      dimension it holds, on the run and on every pool it drew on (holds past expires_at at
      that instant not counted, as the service does), with run limits as they were then (later
      ResumeRun deltas taken back).

    Runs judged in advisory mode are skipped by the grant check (they never refuse).
    Returns counts, for the caller's sanity checks."""
    # One snapshot for every read: the services' sweepers may still be ending holds.
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await _audit_budget(conn)


async def _audit_budget(conn: asyncpg.Connection) -> dict[str, int]:
    await assert_ledger_matches_balances(conn)

    gaps = await conn.fetch(
        "SELECT r.run_id, r.next_seq, count(e.seq) AS n, coalesce(min(e.seq), 1) AS lo,"
        " coalesce(max(e.seq), 0) AS hi FROM budget.runs r LEFT JOIN budget.events e"
        " ON e.tenant_id = r.tenant_id AND e.run_id = r.run_id"
        " GROUP BY r.tenant_id, r.run_id, r.next_seq"
        " HAVING count(e.seq) <> coalesce(max(e.seq), 0) OR coalesce(min(e.seq), 1) <> 1"
        " OR r.next_seq <> coalesce(max(e.seq), 0) + 1"
    )
    assert not gaps, f"event sequences with gaps: {[dict(g) for g in gaps][:5]}"

    runs = {(r["tenant_id"], r["run_id"]): r for r in await conn.fetch("SELECT * FROM budget.runs")}
    holds = {
        (h["tenant_id"], h["run_id"], h["reservation_id"]): h
        for h in await conn.fetch("SELECT * FROM budget.holds")
    }
    ledger = await conn.fetch("SELECT * FROM budget.ledger ORDER BY entry_id")
    scope_limits = {
        (s["tenant_id"], s["scope"], s["scope_id"]): {x: s[f"max_{x}"] for x in SUFFIXES}
        for s in await conn.fetch("SELECT * FROM budget.scope_budgets WHERE kind = 'pooled'")
    }

    grants: dict[tuple[str, str, str], int] = defaultdict(int)
    ends: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for row in ledger:
        if row["reservation_id"] is None:
            continue
        key = (row["tenant_id"], row["run_id"], row["reservation_id"])
        if row["decision"] == "grant":
            grants[key] += 1
            hold = holds[key]
            assert all(row[f"held_{s}"] == hold[f"granted_{s}"] for s in SUFFIXES), key
        elif row["decision"] in ("consume", "release", "expire") and any(
            row[f"held_{s}"] < 0 for s in SUFFIXES
        ):
            ends[key].append(row["decision"])
    ending = {"consumed": "consume", "released": "release", "expired": "expire"}
    for key, hold in holds.items():
        assert grants[key] == 1, f"hold {key} granted {grants[key]} times"
        if hold["state"] == "open":
            assert ends[key] == [], f"open hold {key} has ledger ends {ends[key]}"
            assert hold["ended_at"] is None, key
        else:
            assert ends[key] == [ending[hold["state"]]], f"hold {key}: {hold['state']} {ends[key]}"
    assert set(grants) <= set(holds), "a grant row names no hold"

    # Run limits at each ledger row: the final limit minus the ResumeRun deltas still to come.
    later_delta: dict[tuple[str, str], dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(SUFFIXES, 0)
    )
    limit_then: dict[int, dict[str, int | None]] = {}
    for row in reversed(ledger):
        key = (row["tenant_id"], row["run_id"])
        run = runs[key]
        if row["decision"] == "grant":
            limit_then[row["entry_id"]] = {
                s: None if run[f"max_{s}"] is None else run[f"max_{s}"] - later_delta[key][s]
                for s in SUFFIXES
            }
        if row["decision"] == "resume":
            detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else row["detail"]
            for name, amount in (detail or {}).get("delta", {}).items():
                later_delta[key][DIMENSION_NAMES[name]] += amount

    balances: dict[Any, _Balance] = {}

    def balance(key: Any, limits: dict[str, int | None]) -> _Balance:
        if key not in balances:
            balances[key] = _Balance(limits)
        return balances[key]

    checked = 0
    for row in ledger:
        tenant, run_id = row["tenant_id"], row["run_id"]
        run = runs[(tenant, run_id)]
        keys: list[tuple[Any, dict[str, int | None]]] = [
            (("run", tenant, run_id), limit_then.get(row["entry_id"], {}))
        ]
        for scope, scope_id, window in _pool_keys(row["pools"]):
            limits = scope_limits.get((tenant, scope, scope_id), dict.fromkeys(SUFFIXES))
            keys.append((("pool", tenant, scope, scope_id, window), limits))
        hold_key = (tenant, run_id, row["reservation_id"])
        for key, limits in keys:
            b = balance(key, limits)
            if row["decision"] == "grant":
                hold = holds[hold_key]
                granted = {s: hold[f"granted_{s}"] for s in SUFFIXES}
                if not run["scope_advisory"]:
                    now = hold["created_at"]
                    for s in SUFFIXES:
                        limit = limits.get(s)
                        # A grant adds nothing to a dimension it holds none of (an earlier
                        # overrun may have left that one over already: recorded usage).
                        if limit is None or granted[s] == 0:
                            continue
                        held = sum(
                            amounts[s]
                            for amounts, expires in b.open_holds.values()
                            if expires > now
                        )
                        assert b.consumed[s] + held + granted[s] <= limit, (
                            f"grant {row['entry_id']} on {key} {s}: consumed {b.consumed[s]}"
                            f" + held {held} + granted {granted[s]} > limit {limit}"
                        )
                    checked += 1
                b.open_holds[row["reservation_id"]] = (granted, hold["expires_at"])
            elif row["reservation_id"] is not None and any(row[f"held_{s}"] < 0 for s in SUFFIXES):
                b.open_holds.pop(row["reservation_id"], None)
            for s in SUFFIXES:
                b.consumed[s] += row[f"consumed_{s}"]
    return {
        "runs": len(runs),
        "holds": len(holds),
        "ledger_rows": len(ledger),
        "grants_checked": checked,
    }


async def wait_for_no_overdue_holds(conn: asyncpg.Connection, within: float = 30) -> None:
    """Until the sweeper has marked every hold past its expiry (bounded wait for a condition)."""
    deadline = time.monotonic() + within
    query = "SELECT count(*) FROM budget.holds WHERE state = 'open' AND expires_at <= now()"
    while await conn.fetchval(query):
        assert time.monotonic() < deadline, "overdue holds were never marked expired"
        await asyncio.sleep(0.1)


# --- memory audit ----------------------------------------------------------------------------


async def audit_memory(
    conn: asyncpg.Connection,
    head_bytes: Callable[[str], Awaitable[tuple[int, int]]],
    *,
    sample_revisions: int = 25,
) -> dict[str, int]:
    """Per memory: revisions 1..head without gaps and head_revision on the memory row; each
    revision's change_count equals its recorded changes; manifest item ranges of an entry do not
    overlap and at most one is open; GetCapacity at the head (via `head_bytes(ref)` →
    (revision, manifest_bytes)) and the stored bytes of the head and of sampled past revisions
    equal the RFC 8785 length of the manifest materialised from the store."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await _audit_memory(conn, head_bytes, sample_revisions)


async def _audit_memory(
    conn: asyncpg.Connection,
    head_bytes: Callable[[str], Awaitable[tuple[int, int]]],
    sample_revisions: int,
) -> dict[str, int]:
    memories = await conn.fetch("SELECT * FROM memory.memories ORDER BY memory_ref")
    revisions_checked = 0
    for memory in memories:
        key = (memory["tenant_id"], memory["memory_id"])
        ref = memory["memory_ref"]
        revisions = await conn.fetch(
            "SELECT revision, change_count, manifest_bytes FROM memory.revisions"
            " WHERE tenant_id = $1 AND memory_id = $2 ORDER BY revision",
            *key,
        )
        numbers = [r["revision"] for r in revisions]
        head = memory["head_revision"]
        assert numbers == list(range(1, head + 1)), f"{ref}: revisions {numbers[:20]}…, head {head}"
        counts = {
            r["revision"]: r["n"]
            for r in await conn.fetch(
                "SELECT revision, count(*) AS n FROM memory.changes"
                " WHERE tenant_id = $1 AND memory_id = $2 GROUP BY revision",
                *key,
            )
        }
        assert all(counts.get(r["revision"]) == r["change_count"] for r in revisions), ref
        overlapping = await conn.fetchval(
            "SELECT count(*) FROM memory.manifest_items a JOIN memory.manifest_items b"
            " ON a.tenant_id = b.tenant_id AND a.memory_id = b.memory_id"
            " AND a.entry_id = b.entry_id AND a.from_rev < b.from_rev"
            " AND (a.to_rev IS NULL OR a.to_rev > b.from_rev)"
            " WHERE a.tenant_id = $1 AND a.memory_id = $2",
            *key,
        )
        assert overlapping == 0, f"{ref}: overlapping manifest item ranges"
        reported_revision, reported_bytes = await head_bytes(ref)
        assert reported_revision == head, ref
        assert reported_bytes == len(await materialise(conn, ref, head)), ref
        step = max(1, head // sample_revisions)
        for r in revisions[::step] + revisions[-1:]:
            document = await materialise(conn, ref, r["revision"])
            assert r["manifest_bytes"] == len(document), (ref, r["revision"])
            revisions_checked += 1
    return {"memories": len(memories), "revisions_checked": revisions_checked}
