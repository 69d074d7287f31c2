"""Noisy neighbour, notify: tenant B's alert latency alone, and while A's 36 receivers drip.

One budget service with two tenants' tokens and one `ration notify` process, both started as
users start them. Tenant B's webhook takes `run.failed`; each round B opens a run and breaches
it, and the latency is from the refused Reserve's answer to the alert's arrival at B's
receiver (in this process). Then tenant A, whose 36 webhooks point at a receiver that answers
one byte every 0.2 s forever, breaches a run: every one of A's webhooks keeps a POST open until
its deadline (RATION_NOTIFY_TIMEOUT_MS) and retries. B's rounds are measured again; the figure
is B's p99 while A drips ÷ B's p99 alone (DESIGN 5: at most 2). At the end, how long `ration
notify` took to exit after SIGTERM with A's POSTs in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web

from bench import tenants
from bench.stats import nearest_rank as percentile
from ration.budget.v1 import budget_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc

A_WEBHOOKS = 36  # more POSTs than a default thread pool has threads (32 at most)
DRIP_EVERY = 0.2
WAIT_SECONDS = 60.0  # a bound on a hang, not a target


class Receivers:
    """B's receiver (records when each run's alert arrived) and A's dripping one."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.new_arrival = asyncio.Event()
        self.dripping = 0  # A's POSTs being answered now

    async def _b(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.arrived[body["runId"]] = time.monotonic()
        self.new_arrival.set()
        return web.Response(status=200)

    async def _a(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads the POST, then answers a status line and one header byte every DRIP_EVERY,
        forever: until the sender cuts the POST at its deadline."""
        self.dripping += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            while True:
                await writer.drain()
                await asyncio.sleep(DRIP_EVERY)
                if reader.at_eof() or writer.is_closing():
                    return
                writer.write(b"a")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return  # the sender closed the connection
        except asyncio.CancelledError:
            # The receiver is closing with this POST still dripping (the figure is over):
            # asyncio's stream server would print the cancelled handler's traceback.
            return
        finally:
            self.dripping -= 1
            writer.close()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[tuple[str, str]]:
        """(A's URL, B's URL) on loopback while inside the block."""
        app = web.Application()
        app.router.add_post("/b", self._b)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        b_port = runner.addresses[0][1]
        dripping = await asyncio.start_server(self._a, "127.0.0.1", 0)
        a_port = dripping.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{a_port}/a", f"http://127.0.0.1:{b_port}/b"
        finally:
            dripping.close()
            await runner.cleanup()

    async def wait_for(self, run_id: str) -> float:
        deadline = time.monotonic() + WAIT_SECONDS
        while run_id not in self.arrived:
            self.new_arrival.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the alert of {run_id} did not arrive")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.new_arrival.wait(), min(left, 1.0))
        return self.arrived[run_id]


async def breach(stub: Any, tenant: str, run_id: str) -> float:
    """Opens a run of 10 tokens and asks for 20: refused, the run fails (run.failed)."""
    metadata = tenants.metadata(tenant)
    policy = pb.BudgetPolicy(max_tokens=10)
    opened = pb.OpenRunRequest(
        request_id=uuid.uuid4().hex, run_id=run_id, project_id="noisy", policy=policy
    )
    await stub.OpenRun(opened, metadata=metadata, timeout=30)
    reserve = pb.ReserveRequest(
        request_id=uuid.uuid4().hex, run_id=run_id, model="m", estimate=pb.Amounts(tokens=20)
    )
    with contextlib.suppress(grpc.aio.AioRpcError):  # BUDGET_EXHAUSTED: the point
        await stub.Reserve(reserve, metadata=metadata, timeout=30)
    return time.monotonic()


async def b_latencies(stub: Any, receivers: Receivers, phase: str, rounds: int) -> list[float]:
    found = []
    for i in range(rounds):
        run_id = f"b-{phase}-{i}-{uuid.uuid4().hex[:6]}"
        sent = await breach(stub, tenants.MEASURED, run_id)
        found.append((await receivers.wait_for(run_id) - sent) * 1000)
    return found


def _notify(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    ration = Path(sys.executable).parent / "ration"
    argv = [str(ration), "notify"] if ration.exists() else [
        sys.executable, "-m", "ration_server.entry", "notify"
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _started(log: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until its start line is in the log (a thread: the loop serves the receivers)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while b"notify: " not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"ration notify did not start: {log.read_text()[-600:]}")
        time.sleep(0.05)


async def _measure(
    budget_address: str, database_env: dict[str, str], rounds: int, logs: Path
) -> dict[str, Any]:
    receivers = Receivers()
    async with (
        receivers.serving() as (a_url, b_url),
        grpc.aio.insecure_channel(budget_address) as channel,
    ):
        stub = budget_service_pb2_grpc.BudgetServiceStub(channel)  # type: ignore[no-untyped-call]
        hooks: list[dict[str, Any]] = [
            {"id": f"a{i}", "tenant": tenants.NOISY, "url": a_url, "secret": "bench"}
            for i in range(A_WEBHOOKS)
        ]
        b_hook = {"id": "b", "tenant": tenants.MEASURED, "url": b_url, "secret": "bench"}
        hooks.append({**b_hook, "events": ["run.failed"]})
        hooks_path = logs / "noisy-webhooks.json"
        hooks_path.write_text(json.dumps({"webhooks": hooks}))
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(
            database_env,
            RATION_NOTIFY_WEBHOOKS_FILE=str(hooks_path),
            RATION_NOTIFY_POLL_MS="100",
            RATION_NOTIFY_START="earliest",  # B's first runs may come before its lease
            RATION_NOTIFY_TIMEOUT_MS="3000",
            RATION_NOTIFY_LISTEN="127.0.0.1:0",
            RATION_NOTIFY_METRICS_LISTEN="off",
            RATION_LOG_LEVEL="WARNING",
        )
        log = logs / "notify.log"
        proc = _notify(env, log)
        try:
            await asyncio.to_thread(_started, log, proc)
            await b_latencies(stub, receivers, "warmup", 2)
            alone = await b_latencies(stub, receivers, "alone", rounds)
            await breach(stub, tenants.NOISY, f"a-noise-{uuid.uuid4().hex[:6]}")
            deadline = time.monotonic() + WAIT_SECONDS
            while receivers.dripping < A_WEBHOOKS // 2:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {receivers.dripping} of A's POSTs started")
                await asyncio.sleep(0.05)
            under = await b_latencies(stub, receivers, "under", rounds)
            dripping = receivers.dripping
            stopped = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 60)
            stop_s = time.monotonic() - stopped
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    alone_p99, under_p99 = percentile(alone, 99), percentile(under, 99)
    return {
        "status": "ok",
        "rounds": rounds,
        "a_webhooks": A_WEBHOOKS,
        "a_posts_dripping": dripping,
        "alone_p50_ms": round(percentile(alone, 50), 2),
        "alone_p99_ms": round(alone_p99, 2),
        "under_p50_ms": round(percentile(under, 50), 2),
        "under_p99_ms": round(under_p99, 2),
        "ratio_p99": round(under_p99 / alone_p99, 2) if alone_p99 > 0 else None,
        "sigterm_exit_s": round(stop_s, 2),
        "exit_code": code,
    }


def measure(
    budget_address: str, database_env: dict[str, str], rounds: int, logs: Path
) -> dict[str, Any]:
    return asyncio.run(_measure(budget_address, database_env, rounds, logs))
