"""Answers larger than one gRPC message: cut at whole entries and reported as STOPPED_BY_SIZE,
never a transport error (DESIGN.md 4.5)."""

from __future__ import annotations

import grpc

from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as pb
from tests.support.memory import Memory
from tests.support.servers import StartServer

ENTRIES = 100
ENTRY_CHARS = 60 * 1024
MIB = 1024 * 1024
# The embedder adds nothing here but minutes of CPU for 6 MB of content.
NO_EMBEDDER = {"RATION_MEMORY_EMBEDDER": "off"}


def bound(max_message_bytes: int) -> int:
    """RATION_MAX_MESSAGE_BYTES (at most the 4 MiB a default client receives) less the margin."""
    limit = min(max_message_bytes, 4 * MIB)
    return limit - min(64 * 1024, limit // 16)


def large(number: int) -> str:
    """60 KiB of words, distinct per entry (dedupe sees no duplicates)."""
    words = f"entry {number} " + " ".join(f"word{(number * 7919 + k) % 10007}" for k in range(9000))
    return words[:ENTRY_CHARS]


async def fill(memory: Memory) -> list[m.EntryVersion]:
    """ENTRIES large entries (6 MB in all), ten per append; returned in recency order (newest
    created_at first, the entries of one append by entry_id)."""
    stored: list[m.EntryVersion] = []
    for start in range(0, ENTRIES, 10):
        reply = await memory.append(*(large(n) for n in range(start, start + 10)))
        stored.extend(reply.entries)
    stored.sort(key=lambda e: e.entry_id.encode())
    stored.sort(key=lambda e: e.created_at.ToNanoseconds(), reverse=True)
    return stored


def assert_cut_at_size(reply: pb.ListMemoryResponse, newest: list[m.EntryVersion], at: int) -> None:
    returned = len(reply.entries)
    assert 0 < returned < ENTRIES
    assert reply.stopped_by == m.STOPPED_BY_SIZE
    assert reply.ByteSize() <= at
    # The longest newest-first prefix that fits: one more entry would not have.
    assert reply.ByteSize() + ENTRY_CHARS > at
    assert [e.entry_id for e in reply.entries] == [e.entry_id for e in newest[:returned]]
    assert [e.content for e in reply.entries] == [e.content for e in newest[:returned]]
    assert reply.total_tokens == sum(e.sizes.o200k_base for e in newest[:returned])
    assert (reply.candidate_count, reply.omitted_count) == (ENTRIES, ENTRIES - returned)
    assert reply.first_omitted_entry_id == newest[returned].entry_id
    assert reply.first_omitted_size == newest[returned].sizes.o200k_base


async def test_list_memory_over_the_message_limit_answers_the_prefix_that_fits_stopped_by_size(
    start_server: StartServer,
) -> None:
    runner = await start_server("memory", **NO_EMBEDDER)
    # A default client: it receives at most 4 MiB.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "large/list")
        newest = await fill(memory)
        assert_cut_at_size(await memory.list_memory(), newest, bound(4 * MIB))
        # Asked again (the remembered answer), the same.
        assert_cut_at_size(await memory.list_memory(), newest, bound(4 * MIB))
        # Budget and limit still bind first when they leave less.
        by_budget = await memory.list_memory(
            token_budget=10 * ENTRY_CHARS, token_counter=m.TOKEN_COUNTER_CHARS
        )
        assert (len(by_budget.entries), by_budget.stopped_by) == (10, m.STOPPED_BY_BUDGET)
        by_limit = await memory.list_memory(limit=3)
        assert (len(by_limit.entries), by_limit.stopped_by) == (3, m.STOPPED_BY_LIMIT)


async def test_a_lower_message_limit_lowers_the_size_bound(start_server: StartServer) -> None:
    writer = await start_server("memory", **NO_EMBEDDER)
    small = await start_server("memory", RATION_MAX_MESSAGE_BYTES=str(MIB), **NO_EMBEDDER)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{writer.port}") as channel:
        newest = await fill(Memory(channel, "large/small-limit"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{small.port}") as channel:
        memory = Memory(channel, "large/small-limit")
        assert_cut_at_size(await memory.list_memory(), newest, bound(MIB))
        hits = await memory.search(mode=m.SEARCH_MODE_FILTER, limit=100)
        assert hits.stopped_by == m.STOPPED_BY_SIZE
        assert len(hits.hits) > 0
        assert hits.ByteSize() <= bound(MIB)


async def test_search_memory_over_the_message_limit_answers_the_best_hits_that_fit(
    start_server: StartServer,
) -> None:
    runner = await start_server("memory", **NO_EMBEDDER)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "large/search")
        newest = await fill(memory)
        reply = await memory.search(mode=m.SEARCH_MODE_FILTER, limit=100)
        returned = len(reply.hits)
        assert 0 < returned < ENTRIES
        assert reply.stopped_by == m.STOPPED_BY_SIZE
        assert bound(4 * MIB) - ENTRY_CHARS < reply.ByteSize() <= bound(4 * MIB)
        assert [h.entry.entry_id for h in reply.hits] == [e.entry_id for e in newest[:returned]]
        within = await memory.search(mode=m.SEARCH_MODE_FILTER, limit=10)
        assert (len(within.hits), within.stopped_by) == (10, m.STOPPED_BY_NONE)
