"""WatchRunEvents streams are capped per tenant; a slot frees when its stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from ration_client import TooManyStreams
from ration_client.errors import decode as client_decode
from tests.support.budget import Budget
from tests.support.errors import RpcErrorDetails, decode
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

CAP = 3
READ_TIMEOUT = 15  # a bound on a hang, not a speed assertion

As = Callable[[str], Budget]


def token_file(path: Path) -> Path:
    return write_token_file(path, ("a-writer", "a", ["writer"]), ("b-writer", "b", ["writer"]))


@pytest.fixture
async def as_(start_server: StartServer, tmp_path: Path) -> AsyncIterator[As]:
    runner = await start_server(
        "budget",
        RATION_TOKEN_FILE=str(token_file(tmp_path / "tokens.json")),
        RATION_BUDGET_MAX_STREAMS_PER_TENANT=str(CAP),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield lambda token: Budget(channel, (("authorization", f"Bearer {token}"),))


async def opened(budget: Budget, run_id: str) -> grpc.aio.UnaryStreamCall:
    """A stream that is being served: its first event (budget.reserved) has arrived."""
    stream = budget.stub.WatchRunEvents(
        pb.WatchRunEventsRequest(run_id=run_id), metadata=budget.metadata
    )
    reply = await asyncio.wait_for(stream.read(), READ_TIMEOUT)
    assert reply is not grpc.aio.EOF
    assert reply.event.seq == 1
    return stream


async def refused(budget: Budget, run_id: str) -> RpcErrorDetails:
    stream = budget.stub.WatchRunEvents(
        pb.WatchRunEventsRequest(run_id=run_id), metadata=budget.metadata
    )
    try:
        await asyncio.wait_for(stream.read(), READ_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        found = decode(error)
        if found.reason == "TOO_MANY_STREAMS":  # the client's typed exception, with its delay
            typed = client_decode(error)
            assert isinstance(typed, TooManyStreams)
            assert typed.retry_after_seconds > 0
        return found
    raise AssertionError("the stream opened but should have been refused")


async def opened_soon(budget: Budget, run_id: str) -> grpc.aio.UnaryStreamCall:
    """The server frees a slot once it has seen the cancellation: allow it a moment."""
    for _ in range(100):
        try:
            return await opened(budget, run_id)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await asyncio.sleep(0.05)
    raise AssertionError("no slot freed after a stream was cancelled")


async def test_streams_beyond_the_tenant_cap_are_refused_until_one_ends(as_: As) -> None:
    a, b = as_("a-writer"), as_("b-writer")
    await a.open_run("r")
    await b.open_run("r")
    streams = [await opened(a, "r") for _ in range(CAP)]
    full = await refused(a, "r")
    assert (full.code, full.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_STREAMS")
    assert full.metadata == {"limit": str(CAP)}
    assert full.detail(error_details_pb2.RetryInfo) is not None
    other = await opened(b, "r")  # another tenant is unaffected
    streams[0].cancel()
    streams[0] = await opened_soon(a, "r")
    assert (await refused(a, "r")).reason == "TOO_MANY_STREAMS"  # the cap still holds
    for stream in (*streams, other):
        stream.cancel()


async def test_refused_or_failed_streams_hold_no_slot(as_: As) -> None:
    a = as_("a-writer")
    await a.open_run("r")
    for _ in range(CAP + 2):  # each takes a slot and gives it back when it fails
        assert (await refused(a, "missing")).reason == "RUN_NOT_FOUND"
    streams = [await opened(a, "r") for _ in range(CAP)]
    for _ in range(2):  # a refusal for the cap takes no slot either
        assert (await refused(a, "r")).reason == "TOO_MANY_STREAMS"
    streams[0].cancel()
    streams[0] = await opened_soon(a, "r")
    for stream in streams:
        stream.cancel()
