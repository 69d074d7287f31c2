"""`ration notify` as operators run it: a process that delivers, stops cleanly (within 10 s of
SIGTERM mid-POST), logs no secret, serves health and metrics, refuses unsendable webhooks, and
joins `ration up`'s embedded Postgres in development mode."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.procs import BIN, Proc, clean_env, embedded_data_dir
from tests.support.servers import StartServer
from tests.support.webhooks import Receiver


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


async def health_status(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        return int(answer.status)


pytestmark = pytest.mark.system

SECRET = "notify-secret-value"


def notify_env(database_url: str, hooks: Path, **extra: str) -> dict[str, str]:
    return clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_NOTIFY_WEBHOOKS_FILE=str(hooks),
        RATION_NOTIFY_POLL_MS="50",
        RATION_NOTIFY_START="earliest",
        RATION_LOG_FORMAT="json",
        RATION_NOTIFY_LISTEN="127.0.0.1:0",
        RATION_NOTIFY_METRICS_LISTEN="127.0.0.1:0",
        **extra,
    )


def hooks_file(path: Path, *rows: dict[str, str]) -> Path:
    path.write_text(json.dumps({"webhooks": list(rows)}))
    return path


async def breach(address: str) -> None:
    """Four alerts of the development tenant: threshold crossed, exhausted, breached, failed."""
    async with grpc.aio.insecure_channel(address) as channel:
        budget = Budget(channel)
        await budget.open_run("r", max_tokens=10, threshold_percent=50)
        hold = await budget.reserve("r", tokens=10)
        await budget.consume("r", hold.reservation.reservation_id, tokens=6)
        assert (await rpc_error(budget.reserve("r", tokens=5))).reason


def started(proc: Proc) -> tuple[str, str]:
    """Waits for the start line; its health address and metrics URL."""
    proc.wait_for("notify: 1 webhooks of 1 tenants")
    words = proc.lines[-1].split()
    return words[words.index("health") + 1], words[words.index("metrics") + 1]


async def test_ration_notify_delivers_then_stops_giving_up_its_lease(
    start_server: StartServer, database_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    runner = await start_server("budget")  # development mode: tenant "dev"
    with Receiver() as receiver:
        url = receiver.url("/hooks/token-in-the-path")
        hooks = tmp_path / "hooks.json"
        row = {"id": "ops", "tenant": "dev", "url": url, "secret_env": "OPS_SECRET"}
        hooks.write_text(json.dumps({"webhooks": [row]}))
        proc = Proc.start(
            [str(BIN / "ration"), "notify"], notify_env(database_url, hooks, OPS_SECRET=SECRET)
        )
        try:
            health_address, metrics_url = await asyncio.to_thread(started, proc)
            await breach(f"127.0.0.1:{runner.port}")
            accepted = await receiver.wait_accepted(4)
            for _ in range(3000):  # bounded: until the last acknowledgement is stored
                if await db.fetchval("SELECT delivered FROM budget.notify_progress") == 4:
                    break
                await asyncio.sleep(0.01)
            metrics = await asyncio.to_thread(scrape, metrics_url)
            serving = await health_status(health_address)
        finally:
            code = await asyncio.to_thread(proc.stop, signal.SIGTERM)
    assert code == 0, proc.stderr_tail()
    assert all(r.signed_by(SECRET) for r in accepted)
    assert [r.json()["type"] for r in accepted] == [
        "budget.threshold.crossed",
        "budget.exhausted",
        "cap.breached",
        "run.failed",
    ]
    row = await db.fetchrow("SELECT holder, delivered FROM budget.notify_progress")
    assert row is not None
    assert (row["holder"], row["delivered"]) == (None, 4)  # the lease was given up at the stop
    assert 'ration_notify_deliveries_total{webhook="ops"} 4.0' in metrics
    assert 'ration_notify_leases{webhook="ops"} 1.0' in metrics
    assert "ration_notify_lag_seconds{" in metrics
    assert serving == health_pb2.HealthCheckResponse.SERVING
    logs = "".join(proc.errors)
    assert "webhook delivered" in logs
    assert SECRET not in logs
    assert "token-in-the-path" not in logs


def test_ration_notify_without_webhooks_exits_2_naming_the_variable(database_url: str) -> None:
    env = clean_env(RATION_DATABASE_URL=database_url)
    env.pop("RATION_NOTIFY_WEBHOOKS_FILE", None)
    done = subprocess.run(
        [str(BIN / "ration"), "notify"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "RATION_NOTIFY_WEBHOOKS_FILE is required" in done.stderr


async def test_ration_notify_exits_within_10_s_of_sigterm_mid_post_and_redelivers_later(
    start_server: StartServer, database_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    """A POST whose answer drips (within its 20 s deadline) is in flight at SIGTERM: the
    process ends at once, the event unacknowledged; the next process delivers it."""
    runner = await start_server("budget")  # development mode: tenant "dev"
    slow = {"RATION_NOTIFY_TIMEOUT_MS": "20000", "RATION_NOTIFY_LEASE_SECONDS": "60"}
    with Receiver(drip=("*",)) as dripping, Receiver() as receiver:
        row = {"id": "ops", "tenant": "dev", "url": dripping.url(), "secret": SECRET}
        hooks = hooks_file(tmp_path / "hooks.json", row)
        proc = Proc.start([str(BIN / "ration"), "notify"], notify_env(database_url, hooks, **slow))
        try:
            await asyncio.to_thread(started, proc)
            await breach(f"127.0.0.1:{runner.port}")
            await dripping.wait_in_flight(1)
            proc.send(signal.SIGTERM)
            code = await asyncio.to_thread(proc.popen.wait, 10)  # TimeoutExpired: too slow
        finally:
            proc.stop(signal.SIGKILL, timeout=10)
        assert code == 0, proc.stderr_tail()
        (cut,) = await dripping.wait_received(1)
        progress = await db.fetchrow("SELECT holder, delivered FROM budget.notify_progress")
        assert progress is not None
        assert (progress["holder"], progress["delivered"]) == (None, 0)
        hooks = hooks_file(tmp_path / "hooks.json", row | {"url": receiver.url()})
        again = Proc.start([str(BIN / "ration"), "notify"], notify_env(database_url, hooks))
        try:
            await asyncio.to_thread(started, again)
            accepted = await receiver.wait_accepted(4)
        finally:
            assert await asyncio.to_thread(again.stop, signal.SIGTERM) == 0
    assert cut.status == 0
    assert accepted[0].delivery_id == cut.delivery_id  # at-least-once: the same delivery
    assert accepted[0].body == cut.body
    assert len({r.delivery_id for r in accepted}) == 4


def test_ration_notify_exits_2_naming_a_webhook_that_can_never_be_sent(
    database_url: str, tmp_path: Path
) -> None:
    good = {"id": "ok", "tenant": "dev", "url": "http://127.0.0.1:9/ok", "secret": SECRET}
    bad = good | {"id": "bad", "url": "http://127.0.0.1:abc/hook-token"}
    hooks = hooks_file(tmp_path / "hooks.json", good, bad)
    done = subprocess.run(
        [str(BIN / "ration"), "notify"],
        env=notify_env(database_url, hooks),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "webhooks[1].url" in done.stderr
    assert "hook-token" not in done.stderr
    assert "Traceback" not in done.stderr


async def test_ration_notify_joins_the_embedded_postgres_of_ration_up(tmp_path: Path) -> None:
    """Development: no database URL, no privileged-role override; `ration notify` in the
    same directory finds `make run`'s embedded server as `ration up` does."""
    with embedded_data_dir() as data_dir, Receiver() as receiver:
        up = Proc.start([str(BIN / "ration"), "up"], clean_env(RATION_DATA_DIR=str(data_dir)))
        try:
            await asyncio.to_thread(up.wait_for, "ready:")
            row = {"id": "ops", "tenant": "dev", "url": receiver.url(), "secret": SECRET}
            env = clean_env(
                RATION_DATA_DIR=str(data_dir),
                RATION_NOTIFY_WEBHOOKS_FILE=str(hooks_file(tmp_path / "hooks.json", row)),
                RATION_NOTIFY_POLL_MS="50",
                RATION_NOTIFY_START="earliest",
                RATION_NOTIFY_LISTEN="127.0.0.1:0",
                RATION_NOTIFY_METRICS_LISTEN="127.0.0.1:0",
            )
            env.pop("RATION_ALLOW_PRIVILEGED_DB_ROLE", None)
            notify = Proc.start([str(BIN / "ration"), "notify"], env)
            try:
                await asyncio.to_thread(started, notify)
                await breach(up.addresses["budget"])
                accepted = await receiver.wait_accepted(4)
            finally:
                code = await asyncio.to_thread(notify.stop, signal.SIGTERM)
            assert code == 0, notify.stderr_tail()
        finally:
            assert await asyncio.to_thread(up.stop, signal.SIGINT) == 0, up.stderr_tail()
    assert all(r.signed_by(SECRET) for r in accepted)
    assert [r.json()["runId"] for r in accepted] == ["r"] * 4
