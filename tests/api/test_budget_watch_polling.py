"""WatchRunEvents by polling (RATION_BUDGET_RUN_EVENT_WAKEUP=poll, what Citus uses by itself):
live events written by another server reach the stream in order, with no listening session and
no watcher rows."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc

from budget_service.store.event_hub import LISTENER_NAME
from tests.api.test_budget_watch import produce, read, watch
from tests.support.budget import Budget
from tests.support.servers import StartServer


async def test_a_polling_server_streams_events_another_server_writes(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    polling = await start_server(
        "budget", RATION_BUDGET_RUN_EVENT_WAKEUP="poll", RATION_BUDGET_RUN_EVENT_POLL_MS="20"
    )
    writer = await start_server("budget", RATION_BUDGET_RUN_EVENT_WAKEUP="poll")
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{polling.port}") as watching_channel,
        grpc.aio.insecure_channel(f"127.0.0.1:{writer.port}") as writing_channel,
    ):
        watcher, producer = Budget(watching_channel), Budget(writing_channel)
        await producer.open_run("r", max_tokens=100)
        stream = watch(watcher, "r")
        first = await read(stream, 1)
        assert [e.type for e in first] == ["budget.reserved"]
        await asyncio.sleep(0.1)  # the stream now waits for a wake-up
        await produce(producer, "r", 3)
        later = await read(stream, 3)
        assert [e.seq for e in later] == [2, 3, 4]
        assert {e.type for e in later} == {"budget.consumed"}
        listening = await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            LISTENER_NAME,
        )
        assert listening == 0
        assert await db.fetchval("SELECT count(*) FROM budget.watchers") == 0
        stream.cancel()
