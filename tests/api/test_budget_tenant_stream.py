"""WatchTenantEvents: every event of a tenant's runs once, in the tenant's order, resumable
across reconnects and servers, filtered, tenant-isolated and capped."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import cast

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2

from budget_service.domain.tenant_events import Position, parse_cursor
from ration.budget.v1 import budget_pb2 as pb
from ration_client import Amounts, BudgetClient, Policy, RunEventType
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.postgres import admin, with_database
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

READ_TIMEOUT = 20  # a bound on a hang, not a speed assertion
CAP = 2
CURSOR = Position(1, "r", 1).cursor()
Key = tuple[str, int]  # (run_id, seq)
As = Callable[[str], Budget]


def watch(
    budget: Budget,
    after_cursor: str = "",
    *,
    start_at_latest: bool = False,
    **filter_fields: Sequence[object],
) -> grpc.aio.UnaryStreamCall:
    request = pb.WatchTenantEventsRequest(
        after_cursor=after_cursor,
        start_at_latest=start_at_latest,
        filter=pb.TenantEventFilter(**filter_fields),  # type: ignore[arg-type]
    )
    return budget.stub.WatchTenantEvents(request, metadata=budget.metadata)


async def read(stream: grpc.aio.UnaryStreamCall, count: int) -> list[pb.WatchTenantEventsResponse]:
    """The next `count` events (checkpoints are skipped)."""
    found: list[pb.WatchTenantEventsResponse] = []
    while len(found) < count:
        reply = await asyncio.wait_for(stream.read(), READ_TIMEOUT)
        assert reply is not grpc.aio.EOF
        if reply.HasField("event"):
            found.append(reply)
    return found


def keys(replies: list[pb.WatchTenantEventsResponse]) -> list[Key]:
    return [(r.event.run_id, r.event.seq) for r in replies]


def position(cursor: str) -> Position:
    found = parse_cursor(cursor)
    assert isinstance(found, Position)
    return found


async def stored(db: asyncpg.Connection, tenant: str = "dev") -> list[Key]:
    """The tenant's events in the documented order, read directly as the superuser."""
    rows = await db.fetch(
        "SELECT run_id, seq FROM budget.events WHERE tenant_id = $1"
        ' ORDER BY tx, run_id COLLATE "C", seq',
        tenant,
    )
    return [(r["run_id"], r["seq"]) for r in rows]


async def produce(budget: Budget, run_id: str, consumes: int) -> None:
    for _ in range(consumes):
        await budget.consume(run_id, tokens=1)


async def test_events_of_several_runs_arrive_once_in_the_tenant_order(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    for run_id in ("b", "a", "c"):
        await budget.open_run(run_id, max_tokens=10, threshold_percent=50)
    await asyncio.gather(*(produce(budget, r, 6) for r in ("a", "b", "c")))
    expected = await stored(db)
    assert len(expected) == 3 * (1 + 6 + 1)  # reserved, 6 consumed, threshold crossed
    stream = watch(budget)
    replies = await read(stream, len(expected))
    stream.cancel()
    assert keys(replies) == expected
    positions = [position(r.cursor) for r in replies]
    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions)
    for run_id in ("a", "b", "c"):  # every event of every run (per run, seq order is usual,
        # not promised across transactions: see the RPC's comment)
        assert sorted(s for r, s in keys(replies) if r == run_id) == list(range(1, 9))
    first = replies[0]
    assert first.project_id == "proj"
    assert first.event.type == "budget.reserved"
    assert first.event.HasField("budget_reserved")
    log = {(e.run_id, e.seq): e.payload_json for r in "abc" for e in await budget.events(r)}
    assert all(r.event.payload_json == log[(r.event.run_id, r.event.seq)] for r in replies)


async def test_resuming_from_a_cursor_gives_no_gap_and_no_duplicate(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=10**6)
    await budget.open_run("s", max_tokens=10**6)
    await produce(budget, "r", 3)
    first = watch(budget)
    seen = await read(first, 3)
    first.cancel()  # the client goes away mid-stream
    await asyncio.gather(produce(budget, "r", 3), produce(budget, "s", 3))  # while nobody reads
    second = watch(budget, seen[-1].cursor)
    seen += await read(second, 2 + 6)  # the rest of the history, then what came meanwhile
    await produce(budget, "s", 2)  # live
    seen += await read(second, 2)
    second.cancel()
    assert keys(seen) == await stored(db)
    assert len(keys(seen)) == 2 + 3 + 6 + 2


async def test_two_servers_writing_at_once_are_seen_exactly_once(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    """Writers on two replicas of one database; the stream moves from one to the other."""
    one, two = await start_server("budget"), await start_server("budget")
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{one.port}") as a,
        grpc.aio.insecure_channel(f"127.0.0.1:{two.port}") as b,
    ):
        writers = [Budget(a), Budget(b)]
        runs = [f"run-{i}" for i in range(6)]
        for i, run_id in enumerate(runs):
            await writers[i % 2].open_run(run_id, max_tokens=10**6)

        async def write(i: int) -> None:
            for k in range(8):  # each run is written through both servers, interleaved
                await writers[(i + k) % 2].consume(runs[i], tokens=1)

        total = len(runs) * 9
        stream = watch(writers[0])
        writing = asyncio.gather(*(write(i) for i in range(len(runs))))
        seen = await read(stream, total // 2)  # while the writers write
        stream.cancel()
        await writing
        rest = watch(writers[1], seen[-1].cursor)  # resumed on the other server
        seen += await read(rest, total - len(seen))
        await writers[0].consume(runs[0], tokens=1)  # and live from there
        seen += await read(rest, 1)
        rest.cancel()
    assert len(keys(seen)) == len(set(keys(seen))) == total + 1
    assert keys(seen) == await stored(db)


def token_file(path: Path) -> Path:
    rows = [(f"{t}-{role}", t, [role]) for t in ("alpha", "beta") for role in ("writer", "reader")]
    return write_token_file(path, *rows)


@pytest.fixture
async def as_(start_server: StartServer, tmp_path: Path) -> AsyncIterator[As]:
    runner = await start_server(
        "budget",
        RATION_TOKEN_FILE=str(token_file(tmp_path / "tokens.json")),
        RATION_BUDGET_MAX_TENANT_STREAMS_PER_TENANT=str(CAP),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield lambda token: Budget(channel, (("authorization", f"Bearer {token}"),))


async def test_another_tenants_events_never_appear(as_: As) -> None:
    alpha, beta = as_("alpha-writer"), as_("beta-writer")
    await beta.open_run("shared-name", max_tokens=100)
    await alpha.open_run("shared-name", max_tokens=100)
    await beta.open_run("beta-only", max_tokens=100)
    await produce(beta, "shared-name", 2)
    await produce(alpha, "shared-name", 1)
    stream = watch(as_("alpha-reader"))  # a reader may follow its tenant
    replies = await read(stream, 2)
    await produce(beta, "beta-only", 2)
    await produce(alpha, "shared-name", 1)
    replies += await read(stream, 1)
    stream.cancel()
    assert keys(replies) == [("shared-name", 1), ("shared-name", 2), ("shared-name", 3)]
    consumed = [json.loads(r.event.payload_json)["consumed"] for r in replies[1:]]
    assert consumed == [1, 2]  # alpha's own consumes, not beta's


async def test_the_filter_selects_types_runs_and_projects_and_checkpoints_progress(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r1", project_id="p1", max_tokens=4, threshold_percent=50)
    await budget.open_run("r2", project_id="p2", max_tokens=4, threshold_percent=50)
    await produce(budget, "r1", 4)
    await produce(budget, "r2", 4)
    alerts = [pb.RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED, pb.RUN_EVENT_TYPE_BUDGET_EXHAUSTED]
    by_type = watch(budget, event_types=alerts)
    found = await read(by_type, 4)
    by_type.cancel()
    assert [(r.event.run_id, r.event.type) for r in found] == [
        ("r1", "budget.threshold.crossed"),
        ("r1", "budget.exhausted"),
        ("r2", "budget.threshold.crossed"),
        ("r2", "budget.exhausted"),
    ]
    by_project = watch(budget, project_ids=["p2"], event_types=alerts)
    assert [r.event.run_id for r in await read(by_project, 2)] == ["r2", "r2"]
    by_project.cancel()
    by_run = watch(budget, run_ids=["r1"])
    assert [r.event.seq for r in await read(by_run, 7)] == list(range(1, 8))
    by_run.cancel()
    # Past non-matching events the stream sends a checkpoint: a resume from it skips them.
    none_yet = watch(budget, event_types=[pb.RUN_EVENT_TYPE_RUN_FAILED])
    checkpoint = await asyncio.wait_for(none_yet.read(), READ_TIMEOUT)
    none_yet.cancel()
    assert not checkpoint.HasField("event")
    assert position(checkpoint.cursor) > position(found[-1].cursor)
    resumed = watch(budget, checkpoint.cursor)
    await budget.open_run("r3", project_id="p1")
    assert keys(await read(resumed, 1)) == [("r3", 1)]
    resumed.cancel()


async def test_start_at_latest_skips_the_history(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("old")
    stream = watch(budget, start_at_latest=True)
    first = await asyncio.wait_for(stream.read(), READ_TIMEOUT)
    assert not first.HasField("event")
    assert first.cursor
    await budget.open_run("new")
    assert keys(await read(stream, 1)) == [("new", 1)]
    stream.cancel()


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"after_cursor": "not-a-cursor"}, "after_cursor"),
        ({"after_cursor": CURSOR + "x" * 600}, "after_cursor"),
        ({"after_cursor": CURSOR, "start_at_latest": True}, "start_at_latest"),
        (
            {"filter": pb.TenantEventFilter(event_types=[pb.RUN_EVENT_TYPE_UNSPECIFIED])},
            "filter.event_types[0]",
        ),
        (
            {"filter": pb.TenantEventFilter(event_types=[cast(pb.RunEventType, 99)])},
            "filter.event_types[0]",
        ),
        (
            {"filter": pb.TenantEventFilter(event_types=[pb.RUN_EVENT_TYPE_RUN_FAILED] * 17)},
            "filter.event_types",
        ),
        ({"filter": pb.TenantEventFilter(run_ids=["ok", "bad id"])}, "filter.run_ids[1]"),
        ({"filter": pb.TenantEventFilter(run_ids=["r"] * 101)}, "filter.run_ids"),
        ({"filter": pb.TenantEventFilter(project_ids=[""])}, "filter.project_ids[0]"),
        ({"filter": pb.TenantEventFilter(project_ids=["p" * 129])}, "filter.project_ids[0]"),
    ],
)
async def test_bad_requests_are_invalid_argument_with_the_field(
    shared_budget_channel: grpc.aio.Channel, request_fields: dict[str, object], field: str
) -> None:
    # Refused before it reads anything: the module's shared server will do. (The other tests
    # read a tenant's whole stream from its start, so each has a database of its own.)
    budget = Budget(shared_budget_channel)
    request = pb.WatchTenantEventsRequest(**request_fields)  # type: ignore[arg-type]
    refused = await rpc_error(budget.stub.WatchTenantEvents(request).read())
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "VALIDATION_FAILED",
    )
    violations = refused.require(error_details_pb2.BadRequest).field_violations
    assert [v.field for v in violations] == [field]


async def test_streams_are_capped_per_tenant(as_: As) -> None:
    reader = as_("alpha-reader")
    opened = [watch(reader, start_at_latest=True) for _ in range(CAP)]
    for stream in opened:  # being served: the first checkpoint arrived
        assert (await asyncio.wait_for(stream.read(), READ_TIMEOUT)).cursor
    refused = await rpc_error(watch(reader).read())
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TOO_MANY_STREAMS",
    )
    assert refused.metadata == {"limit": str(CAP)}
    other = watch(as_("beta-reader"), start_at_latest=True)  # another tenant has its own slots
    assert (await asyncio.wait_for(other.read(), READ_TIMEOUT)).cursor
    other.cancel()
    opened[0].cancel()
    for _ in range(200):  # the server frees the slot once it has seen the cancellation
        again = watch(reader, start_at_latest=True)
        try:
            assert (await asyncio.wait_for(again.read(), READ_TIMEOUT)).cursor
            break
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await asyncio.sleep(0.01)
    else:
        raise AssertionError("the cancelled stream's slot never freed")
    again.cancel()
    opened[1].cancel()


async def test_the_client_follows_the_tenant_with_typed_views(start_server: StartServer) -> None:
    runner = await start_server("budget")
    async with BudgetClient(f"127.0.0.1:{runner.port}") as client:
        await client.open_run("r", project_id="p", policy=Policy(max_tokens=2))
        await client.consume("r", usage=Amounts(tokens=2), model="m")
        alerts = [RunEventType.BUDGET_EXHAUSTED]
        stream = client.watch_tenant(event_types=alerts)
        first = await asyncio.wait_for(anext(stream), READ_TIMEOUT)
        await stream.aclose()
        assert first.event is not None
        assert (first.event.run_id, first.event.type, first.project_id) == (
            "r",
            RunEventType.BUDGET_EXHAUSTED,
            "p",
        )
        assert first.event.payload == {"dimension": "tokens", "consumed": 2, "limit": 2}
        await client.open_run("s", project_id="p")
        rest = client.watch_tenant(first.cursor)  # resumed: only what came after
        after = await asyncio.wait_for(anext(rest), READ_TIMEOUT)
        await rest.aclose()
        assert after.event is not None
        assert (after.event.run_id, after.event.type) == ("s", RunEventType.BUDGET_RESERVED)


async def test_a_cursor_beyond_the_current_position_is_invalid_argument(
    budget_channel: grpc.aio.Channel,
) -> None:
    """A cursor no stream sent (ahead of every transaction so far) would stream silence."""
    budget = Budget(budget_channel)
    latest = watch(budget, start_at_latest=True)
    now = position((await asyncio.wait_for(latest.read(), READ_TIMEOUT)).cursor)
    latest.cancel()
    resumed = watch(budget, now.cursor())  # the latest position itself is fine
    await budget.open_run("new")
    assert keys(await read(resumed, 1)) == [("new", 1)]
    resumed.cancel()
    ahead = Position(now.tx + 10**9, "", 0).cursor()
    refused = await rpc_error(watch(budget, ahead).read())
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "VALIDATION_FAILED",
    )
    violations = refused.require(error_details_pb2.BadRequest).field_violations
    assert [v.field for v in violations] == ["after_cursor"]


async def test_a_client_cancelling_its_stream_logs_nothing_above_debug(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Streams that poll constantly are cancelled at whatever point they are at (usually in
    the middle of a read): the server logs no warning or error for it."""
    runner = await start_server(
        "budget",
        RATION_BUDGET_TENANT_STREAM_POLL_MS="10",
        RATION_BUDGET_MAX_TENANT_STREAMS_PER_TENANT="1",
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.open_run("r")
        with caplog.at_level(logging.DEBUG):
            for _ in range(25):
                stream = await served(budget)  # it read the run's event and reads on
                stream.cancel()
            (await served(budget)).cancel()  # the last cancelled stream's slot is free too
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]


async def served(budget: Budget) -> grpc.aio.UnaryStreamCall:
    """A stream from the start, opened as soon as the tenant's one slot is free (the server
    frees it once it has seen the previous stream's cancellation)."""
    while True:
        stream = watch(budget)
        try:
            await asyncio.wait_for(stream.wait_for_connection(), READ_TIMEOUT)
            first = await asyncio.wait_for(stream.read(), READ_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await asyncio.sleep(0.01)
            continue
        assert first is not grpc.aio.EOF
        return stream


@pytest.fixture
async def busy_elsewhere(pg_server_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A write transaction left open in another database of the same server (until the test
    ends): another application's long batch job."""
    name = f"ration_other_{uuid.uuid4().hex[:12]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(with_database(pg_server_url, name))
    try:
        await conn.execute("BEGIN")
        await conn.execute("CREATE TABLE batch (x integer)")  # it has a transaction id now
        yield conn
    finally:
        await conn.execute("ROLLBACK")
        await conn.close()
        await admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_a_long_transaction_in_another_database_does_not_hold_the_stream(
    budget_channel: grpc.aio.Channel, busy_elsewhere: asyncpg.Connection
) -> None:
    """The other transaction is older than the event and stays open while the stream reads
    (seconds, or for ever): the event still arrives."""
    budget = Budget(budget_channel)
    await budget.open_run("r")
    stream = watch(budget)
    [reply] = await asyncio.wait_for(read(stream, 1), 10)
    stream.cancel()
    assert (reply.event.run_id, reply.event.seq) == ("r", 1)
    assert await busy_elsewhere.fetchval("SELECT count(*) FROM batch") == 0  # still open
