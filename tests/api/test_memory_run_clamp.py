"""ListMemory's run_id clamp against a real budget_service: min(budget, remaining), no consume."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from ration.budget.v1 import budget_pb2 as b
from ration.memory.v1 import memory_pb2 as m
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.memory import Memory
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

CHARS = m.TOKEN_COUNTER_CHARS
ALPHA = (("authorization", "Bearer alpha-token"),)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json",
        ("alpha-token", "alpha", ["writer"]),
        ("beta-token", "beta", ["writer"]),
    )


@dataclass
class Linked:
    budget: Budget
    memory: Memory
    channel: grpc.aio.Channel


@pytest.fixture
async def linked(start_server: StartServer, token_file: Path) -> AsyncIterator[Linked]:
    """A budget server and a memory server that asks it, sharing one token file."""
    budget_runner = await start_server("budget", RATION_TOKEN_FILE=str(token_file))
    memory_runner = await start_server(
        "memory",
        RATION_TOKEN_FILE=str(token_file),
        RATION_MEMORY_BUDGET_ADDRESS=f"127.0.0.1:{budget_runner.port}",
    )
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{budget_runner.port}") as budget_channel,
        grpc.aio.insecure_channel(f"127.0.0.1:{memory_runner.port}") as memory_channel,
    ):
        memory = Memory(memory_channel, "clamp/notes", token="alpha-token")
        # Ten entries of 10 characters, one per append so recency is strict.
        for i in range(10):
            await memory.append(f"note {i:05d}")
        yield Linked(Budget(budget_channel, ALPHA), memory, memory_channel)


async def remaining_tokens(budget: Budget, run_id: str) -> int | None:
    reply = await budget.stub.Check(b.CheckRequest(run_id=run_id), metadata=budget.metadata)
    found = [
        d.remaining
        for d in reply.dimensions
        if d.dimension == b.DIMENSION_TOKENS and d.HasField("remaining")
    ]
    return min(found) if found else None


async def test_the_budget_is_clamped_to_the_runs_remaining_tokens_and_nothing_is_consumed(
    linked: Linked,
) -> None:
    await linked.budget.open_run("run-clamp", max_tokens=1000)
    await linked.budget.consume("run-clamp", tokens=965)
    assert await remaining_tokens(linked.budget, "run-clamp") == 35
    for asked, effective in ((800, 35), (0, 35), (25, 25)):
        reply = await linked.memory.list_memory(
            token_budget=asked, token_counter=CHARS, run_id="run-clamp"
        )
        assert reply.effective_token_budget == effective
        assert reply.total_tokens == 10 * (effective // 10) <= effective
        assert reply.stopped_by == m.STOPPED_BY_BUDGET
    # Asked, never charged: the run's balance is what it was.
    assert await remaining_tokens(linked.budget, "run-clamp") == 35


async def test_a_run_without_a_token_limit_does_not_clamp(linked: Linked) -> None:
    await linked.budget.open_run("run-unbounded", max_cost_nanos=10**9)
    reply = await linked.memory.list_memory(
        token_budget=800, token_counter=CHARS, run_id="run-unbounded"
    )
    assert reply.effective_token_budget == 800
    assert len(reply.entries) == 10
    unbudgeted = await linked.memory.list_memory(run_id="run-unbounded")
    assert not unbudgeted.HasField("effective_token_budget")


async def test_a_run_with_no_tokens_left_gets_nothing(linked: Linked) -> None:
    await linked.budget.open_run("run-spent", max_tokens=100)
    await linked.budget.consume("run-spent", tokens=100)
    reply = await linked.memory.list_memory(token_budget=800, run_id="run-spent")
    assert reply.HasField("effective_token_budget")
    assert reply.effective_token_budget == 0
    assert list(reply.entries) == []
    assert reply.stopped_by == m.STOPPED_BY_BUDGET
    assert reply.omitted_count == reply.candidate_count == 10


async def test_the_run_is_looked_up_as_the_caller(linked: Linked) -> None:
    await linked.budget.open_run("run-alpha", max_tokens=1000)
    beta = Memory(linked.channel, "clamp/notes", token="beta-token")
    for memory, run_id in ((beta, "run-alpha"), (linked.memory, "run-missing")):
        error = await rpc_error(memory.list_memory(token_budget=800, run_id=run_id))
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")


async def test_run_id_without_a_configured_budget_service_is_refused(
    memory_channel: grpc.aio.Channel,
) -> None:
    error = await rpc_error(Memory(memory_channel, "clamp/x").list_memory(run_id="run-1"))
    assert (error.code, error.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "BUDGET_LINK_UNAVAILABLE",
    )
    assert "RATION_MEMORY_BUDGET_ADDRESS" in error.message


async def test_an_unreachable_budget_service_is_unavailable(start_server: StartServer) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runner = await start_server("memory", RATION_MEMORY_BUDGET_ADDRESS=f"127.0.0.1:{port}")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        error = await rpc_error(Memory(channel, "clamp/y").list_memory(run_id="run-1"))
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "BUDGET_UNAVAILABLE")
