"""`ration notify` as operators run it: a process that delivers, stops cleanly, logs no secret."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path

import asyncpg
import grpc
import pytest

from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.procs import BIN, Proc, clean_env
from tests.support.servers import StartServer
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.system

SECRET = "notify-secret-value"


def notify_env(database_url: str, hooks: Path, **extra: str) -> dict[str, str]:
    return clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_NOTIFY_WEBHOOKS_FILE=str(hooks),
        RATION_NOTIFY_POLL_MS="50",
        RATION_NOTIFY_START="earliest",
        RATION_LOG_FORMAT="json",
        **extra,
    )


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
            await asyncio.to_thread(proc.wait_for, "notify: 1 webhooks of 1 tenants")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
                budget = Budget(channel)
                await budget.open_run("r", max_tokens=10, threshold_percent=50)
                hold = await budget.reserve("r", tokens=10)
                await budget.consume("r", hold.reservation.reservation_id, tokens=6)
                assert (await rpc_error(budget.reserve("r", tokens=5))).reason
                accepted = await receiver.wait_accepted(4)
            for _ in range(3000):  # bounded: until the last acknowledgement is stored
                if await db.fetchval("SELECT delivered FROM budget.notify_progress") == 4:
                    break
                await asyncio.sleep(0.01)
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
