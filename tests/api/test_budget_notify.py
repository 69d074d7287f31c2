"""`ration notify`: chosen events of a tenant's stream POSTed to webhooks on loopback, signed,
retried until acknowledged, resumed after a restart, delivered once by several replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from budget_service.adapters.notify_metrics import NotifyMetrics
from budget_service.adapters.webhooks import Sender
from budget_service.usecases.notifier import Follower, Notifier
from budget_service.usecases.notify_settings import NotifySettings
from servicekit.db import Database
from servicekit.settings import Env
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file
from tests.support.webhooks import WAIT_SECONDS, Receiver, ids

ALERTS = ["budget.threshold.crossed", "budget.exhausted", "cap.breached", "run.failed"]
As = Callable[[str], Budget]
MakeSettings = Callable[..., NotifySettings]
OPS = {"webhook": "ops"}


def token_file(path: Path) -> Path:
    return write_token_file(path, *[(f"{t}-writer", t, ["writer"]) for t in ("alpha", "beta")])


@pytest.fixture
async def as_(start_server: StartServer, tmp_path: Path) -> AsyncIterator[As]:
    runner = await start_server("budget", RATION_TOKEN_FILE=str(token_file(tmp_path / "t.json")))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield lambda tenant: Budget(channel, (("authorization", f"Bearer {tenant}-writer"),))


@pytest.fixture
def make_settings(tmp_path: Path, app_database_url: str) -> MakeSettings:
    """Notify settings with these webhooks, fast retries and a short lease."""

    def make(webhooks: list[dict[str, Any]], **env: str) -> NotifySettings:
        path = tmp_path / f"webhooks-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps({"webhooks": webhooks}))
        values = {
            "RATION_DATABASE_URL": app_database_url,
            "RATION_NOTIFY_WEBHOOKS_FILE": str(path),
            "RATION_NOTIFY_POLL_MS": "50",
            "RATION_NOTIFY_RETRY_MIN_MS": "20",
            "RATION_NOTIFY_RETRY_MAX_MS": "200",
            "RATION_NOTIFY_LEASE_SECONDS": "3",
            "RATION_NOTIFY_TIMEOUT_MS": "1000",
            "RATION_NOTIFY_START": "earliest",
            "RATION_DB_POOL_MIN": "1",
        }
        return NotifySettings.from_env(Env(values | env))

    return make


@contextlib.asynccontextmanager
async def notifying(
    settings: NotifySettings, holder: str | None = None, metrics: NotifyMetrics | None = None
) -> AsyncIterator[Notifier]:
    """A notify process's work in this one: stopped (its leases given up) on leaving."""
    assert settings.database.url is not None
    database = Database(settings.database.url, settings.database)
    await database.connect()
    notifier = Notifier(database, settings, holder=holder, metrics=metrics)
    task = asyncio.ensure_future(notifier.run())
    try:
        yield notifier
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await database.close()


async def breach(budget: Budget, run_id: str, project_id: str = "proj") -> None:
    """reserved, consumed, threshold.crossed, then a breach: exhausted, cap.breached, failed."""
    await budget.open_run(run_id, project_id=project_id, max_tokens=100, threshold_percent=90)
    hold = await budget.reserve(run_id, tokens=100)
    await budget.consume(run_id, hold.reservation.reservation_id, tokens=90)
    refused = await rpc_error(budget.reserve(run_id, tokens=20))
    assert refused.reason == "BUDGET_EXHAUSTED"


async def progress(db: asyncpg.Connection, tenant: str, webhook: str) -> asyncpg.Record:
    row = await db.fetchrow(
        "SELECT holder, delivered FROM budget.notify_progress"
        " WHERE tenant_id = $1 AND webhook_id = $2",
        tenant,
        webhook,
    )
    assert row is not None
    return row


async def wait_delivered(db: asyncpg.Connection, tenant: str, webhook: str, count: int) -> None:
    """Until the progress row counts `count` acknowledged deliveries (each is stored just after
    its 2xx arrived); a bounded wait."""
    for _ in range(3000):
        if (await progress(db, tenant, webhook))["delivered"] >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} deliveries were stored")


async def test_alerts_arrive_signed_with_the_openwop_payload(
    as_: As, make_settings: MakeSettings
) -> None:
    alpha, beta = as_("alpha"), as_("beta")
    with Receiver() as receiver:
        settings = make_settings(
            [
                {"id": "ops", "tenant": "alpha", "url": receiver.url("/json"), "secret": "s-json"},
                {
                    "id": "chat",
                    "tenant": "alpha",
                    "url": receiver.url("/slack"),
                    "secret_env": "CHAT_SECRET",
                    "format": "slack",
                    "events": ["budget.exhausted"],
                },
            ],
            CHAT_SECRET="s-slack",
        )
        async with notifying(settings):
            await breach(beta, "r-beta")  # another tenant's alerts never reach alpha's hooks
            await breach(alpha, "r-alpha", project_id="travel")
            posted = await receiver.wait_accepted(4, "/json")
            chat = await receiver.wait_accepted(1, "/slack")
    assert [r.json()["type"] for r in posted] == ALERTS
    assert all(r.signed_by("s-json") for r in posted)
    assert not posted[0].signed_by("s-slack")
    stored = {e.type: json.loads(e.payload_json) for e in await alpha.events("r-alpha")}
    for r in posted:
        body = r.json()
        assert body["deliveryId"] == r.delivery_id
        assert r.headers["X-Ration-Event"] == body["type"]
        assert (body["tenant"], body["runId"], body["projectId"]) == ("alpha", "r-alpha", "travel")
        assert body["payload"] == stored[body["type"]]  # the OpenWOP payload, verbatim
    assert [r.json()["seq"] for r in posted] == [3, 4, 5, 6]
    assert len(set(ids(posted))) == 4
    (text,) = chat
    assert text.signed_by("s-slack")
    assert text.json() == {
        "text": "[ration] run r-alpha (project travel, tenant alpha):"
        " tokens budget exhausted: 90 of 100"
    }
    assert len(receiver.received) == 5


async def test_a_failing_receiver_gets_every_alert_once_it_recovers(
    as_: As, make_settings: MakeSettings, db: asyncpg.Connection
) -> None:
    with Receiver(failures=3) as receiver:
        hook = {"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}
        async with notifying(make_settings([hook])):
            await breach(as_("alpha"), "r")
            accepted = await receiver.wait_accepted(4)
            await wait_delivered(db, "alpha", "ops", 4)
        attempts = receiver.received
    first = attempts[:4]  # the first alert, refused three times, then taken
    assert [r.status for r in first] == [500, 500, 500, 200]
    assert len({r.delivery_id for r in first}) == 1
    assert len({r.body for r in first}) == 1  # the same bytes (and signature) on every attempt
    assert all(r.signed_by("s") for r in attempts)
    assert [r.json()["type"] for r in accepted] == ALERTS
    assert len(set(ids(accepted))) == 4
    assert (await progress(db, "alpha", "ops"))["delivered"] == 4


async def test_a_restart_resumes_without_redelivering_acknowledged_alerts(
    as_: As, make_settings: MakeSettings, db: asyncpg.Connection
) -> None:
    alpha = as_("alpha")
    with Receiver() as receiver:
        settings = make_settings(
            [{"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}]
        )
        async with notifying(settings, holder="first"):
            await breach(alpha, "r1")
            await receiver.wait_accepted(4)
            await wait_delivered(db, "alpha", "ops", 4)  # acknowledged, then the stop
        assert (await progress(db, "alpha", "ops"))["holder"] is None  # given up at the stop
        await breach(alpha, "r2")  # while no notify process runs
        async with notifying(settings, holder="second"):
            await receiver.wait_accepted(8)
            await breach(alpha, "r3")
            accepted = await receiver.wait_accepted(12)
            await wait_delivered(db, "alpha", "ops", 12)
        assert len(receiver.received) == 12
    runs = [r.json()["runId"] for r in accepted]
    assert runs == ["r1"] * 4 + ["r2"] * 4 + ["r3"] * 4
    assert len(set(ids(accepted))) == 12
    assert (await progress(db, "alpha", "ops"))["delivered"] == 12


async def test_a_killed_replicas_lease_expires_and_another_takes_over(
    as_: As, make_settings: MakeSettings, db: asyncpg.Connection, app_database_url: str
) -> None:
    alpha = as_("alpha")
    with Receiver() as receiver:
        settings = make_settings(
            [{"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}]
        )
        database = Database(app_database_url, settings.database)
        await database.connect()
        async with Sender() as sender:
            follower = Follower(database, settings.webhooks[0], settings, "doomed", sender.post)
            doomed = asyncio.ensure_future(follower.run())
            await breach(alpha, "r1")
            await receiver.wait_accepted(4)
            await wait_delivered(db, "alpha", "ops", 4)
            doomed.cancel()  # killed: the lease is not given up
            with contextlib.suppress(asyncio.CancelledError):
                await doomed
        await database.close()
        assert (await progress(db, "alpha", "ops"))["holder"] == "doomed"
        await breach(alpha, "r2")
        async with notifying(settings, holder="heir"):
            accepted = await receiver.wait_accepted(8)
        assert len(receiver.received) == 8
    assert [r.json()["runId"] for r in accepted] == ["r1"] * 4 + ["r2"] * 4
    assert len(set(ids(accepted))) == 8


async def test_two_replicas_deliver_each_alert_once(
    as_: As, make_settings: MakeSettings, db: asyncpg.Connection
) -> None:
    alpha = as_("alpha")
    with Receiver() as receiver:
        settings = make_settings(
            [{"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}]
        )
        async with notifying(settings, holder="a") as a, notifying(settings, holder="b") as b:
            await asyncio.gather(breach(alpha, "r1"), breach(alpha, "r2"))
            accepted = await receiver.wait_accepted(8)
            await wait_delivered(db, "alpha", "ops", 8)  # counted by the sender too
            counts = sorted([a.followers[0].delivered, b.followers[0].delivered])
        assert len(receiver.received) == 8
    assert counts == [0, 8]  # one lease holder delivered everything
    assert len(set(ids(accepted))) == 8
    assert sorted(r.json()["runId"] for r in accepted) == ["r1"] * 4 + ["r2"] * 4


async def test_a_tenants_alerts_arrive_while_another_tenants_receivers_drip(
    as_: As, make_settings: MakeSettings
) -> None:
    """Tenant alpha's 36 webhooks answer one byte at a time, forever (more POSTs than a
    default thread pool has threads); beta's alert still arrives."""
    with Receiver(drip=("*",)) as dripping, Receiver() as receiver:
        hooks = [
            {"id": f"a{i}", "tenant": "alpha", "url": dripping.url(), "secret": "s"}
            for i in range(36)
        ]
        hooks.append({"id": "b", "tenant": "beta", "url": receiver.url(), "secret": "s"})
        async with notifying(make_settings(hooks, RATION_DB_POOL_MAX="4")):
            await breach(as_("alpha"), "r-alpha")
            await dripping.wait_in_flight(6)
            await breach(as_("beta"), "r-beta")
            accepted = await receiver.wait_accepted(4)
        assert dripping.accepted() == []
    assert [r.json()["type"] for r in accepted] == ALERTS
    assert {r.json()["tenant"] for r in accepted} == {"beta"}


async def test_a_dripping_answer_ends_at_the_total_deadline() -> None:
    """Each read gets a byte in time; the POST as a whole is cut at its deadline."""
    with Receiver(drip=("*",)) as dripping:
        async with Sender() as sender:
            with pytest.raises(TimeoutError):
                await sender.post(dripping.url(), b"{}", {}, 1.0)
        (cut,) = await dripping.wait_received(1)
    assert cut.status == 0  # the sender closed the connection before the answer ended
    assert cut.ended - cut.started < 10  # the answer would have dripped for an hour


async def test_a_slow_name_lookup_holds_only_the_posts_to_that_name() -> None:
    """36 POSTs to a name whose lookup hangs (more than a default thread pool's threads); a
    POST to another name is answered meanwhile."""
    released = threading.Event()

    def lookup(host: str, port: int, *args: Any) -> list[tuple[Any, ...]]:
        if host == "slow.localhost":
            released.wait(WAIT_SECONDS)
        return socket.getaddrinfo("127.0.0.1", port, *args)

    with Receiver() as receiver:
        url = receiver.url()
        async with Sender(lookup) as sender:
            slow = url.replace("127.0.0.1", "slow.localhost")
            stuck = [asyncio.ensure_future(sender.post(slow, b"{}", {}, 60)) for _ in range(36)]
            fast = url.replace("127.0.0.1", "fast.localhost")
            assert await sender.post(fast, b"{}", {}, WAIT_SECONDS) == 200
            assert not any(task.done() for task in stuck)
            released.set()
            assert await asyncio.gather(*stuck) == [200] * 36
    assert len(receiver.received) == 37


async def test_no_delivery_is_posted_twice_while_its_post_is_in_flight(
    as_: As, make_settings: MakeSettings, db: asyncpg.Connection
) -> None:
    """Two replicas; the first POSTs drip for twice the lease. Each is cut at the deadline and
    retried by the lease holder (a second later: the receiver sees the cut POST end first);
    the other replica never sends one meanwhile."""
    with Receiver(drip=("*",), drip_seconds=6, drips=3) as receiver:
        settings = make_settings(
            [{"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}],
            RATION_NOTIFY_RETRY_MIN_MS="1000",
            RATION_NOTIFY_RETRY_MAX_MS="1000",
        )
        async with notifying(settings, holder="a") as a, notifying(settings, holder="b") as b:
            await breach(as_("alpha"), "r")
            accepted = await receiver.wait_accepted(4)
            # The receiver records a POST as it answers; the sender counts it once it has read
            # the answer, and stores it just after.
            await wait_delivered(db, "alpha", "ops", 4)
            counts = sorted([a.followers[0].delivered, b.followers[0].delivered])
        received = receiver.received
    assert max(receiver.most_in_flight.values()) == 1
    assert counts == [0, 4]
    first = [r for r in received if r.delivery_id == accepted[0].delivery_id]
    assert [r.status for r in first] == [0, 0, 0, 200]  # cut three times, then taken
    assert [r.json()["type"] for r in accepted] == ALERTS


async def test_metrics_count_deliveries_failures_and_retries_per_webhook(
    as_: As, make_settings: MakeSettings
) -> None:
    with Receiver(failures=2) as receiver:
        settings = make_settings(
            [{"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}]
        )
        registry = CollectorRegistry()
        async with notifying(settings, metrics=NotifyMetrics(registry, settings.labels)):
            await breach(as_("alpha"), "r")
            await receiver.wait_accepted(4)
            for _ in range(3000):  # bounded: until the fourth acknowledgement is counted
                if registry.get_sample_value("ration_notify_deliveries_total", OPS) == 4:
                    break
                await asyncio.sleep(0.01)
            samples = {
                name: registry.get_sample_value(name, labels)
                for name, labels in (
                    ("ration_notify_deliveries_total", OPS),
                    ("ration_notify_retries_total", OPS),
                    ("ration_notify_failures_total", OPS | {"outcome": "http_5xx"}),
                    ("ration_notify_leases", OPS),
                )
            }
            lag = registry.get_sample_value("ration_notify_lag_seconds", OPS)
    assert samples == {
        "ration_notify_deliveries_total": 4,
        "ration_notify_retries_total": 2,
        "ration_notify_failures_total": 2,
        "ration_notify_leases": 1,
    }
    assert lag is not None
    assert lag >= 0
    text = generate_latest(registry).decode()
    assert "alpha" not in text  # the tenant is a label only when the operator opts in
