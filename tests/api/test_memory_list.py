"""ListMemory through the real server: the budgeted prefix, limits, pinning, expiry, refusals.

The tests share the module's server and database, each on memory refs of its own; the two
that configure the server or read its metrics start their own."""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import pytest
from google.protobuf import timestamp_pb2

from ration.memory.v1 import memory_pb2 as m
from tests.support.errors import rpc_error
from tests.support.ids import new_id
from tests.support.memory import Memory, entry
from tests.support.servers import StartServer

CHARS = m.TOKEN_COUNTER_CHARS


def text(length: int, seed: str) -> str:
    """Exactly `length` characters, distinct per seed (so dedupe never sees duplicates)."""
    return (seed + " " + "x" * length)[:length]


async def append_in_order(memory: Memory, *contents: str) -> list[m.EntryVersion]:
    """One append per entry, oldest first, so created_at orders them strictly."""
    stored = [(await memory.append(c)).entries[0] for c in contents]
    stamps = [s.created_at.ToDatetime() for s in stored]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)
    return stored


async def test_budget_800_chars_returns_the_newest_prefix_that_fits_never_the_1000(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/acceptance-1"))
    big, a, b, c, small = await append_in_order(
        memory,
        text(1000, "big"),
        text(240, "first"),
        text(240, "second"),
        text(240, "third"),
        text(102, "newest"),
    )
    reply = await memory.list_memory(token_budget=800, token_counter=CHARS)
    assert [e.entry_id for e in reply.entries] == [small.entry_id, c.entry_id, b.entry_id]
    assert [e.size for e in reply.entries] == [102, 240, 240]
    assert reply.total_tokens == 582
    assert reply.stopped_by == m.STOPPED_BY_BUDGET
    assert reply.token_counter == CHARS
    assert (reply.candidate_count, reply.omitted_count) == (5, 2)
    assert (reply.first_omitted_entry_id, reply.first_omitted_size) == (a.entry_id, 240)
    assert reply.revision == 5
    assert reply.HasField("effective_token_budget")
    assert reply.effective_token_budget == 800
    # Whole entries, exactly as stored.
    assert [e.content for e in reply.entries] == [small.content, c.content, b.content]
    assert [e.entry_version_id for e in reply.entries] == [
        small.entry_version_id,
        c.entry_version_id,
        b.entry_version_id,
    ]
    # Never skipped ahead to, never truncated: the 1,000 stays out at any budget below its turn.
    for budget in (800, 999, 1000, 1821):
        listed = await memory.list_memory(token_budget=budget, token_counter=CHARS)
        assert big.entry_id not in [e.entry_id for e in listed.entries]
    everything = await memory.list_memory(token_budget=1822, token_counter=CHARS)
    assert everything.entries[-1].entry_id == big.entry_id
    assert everything.stopped_by == m.STOPPED_BY_NONE


async def test_an_entry_larger_than_the_budget_ranked_first_gives_an_empty_answer(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/only-big"))
    (big,) = await append_in_order(memory, text(1000, "alone"))
    reply = await memory.list_memory(token_budget=800, token_counter=CHARS)
    assert list(reply.entries) == []
    assert (reply.total_tokens, reply.candidate_count, reply.omitted_count) == (0, 1, 1)
    assert reply.stopped_by == m.STOPPED_BY_BUDGET
    assert (reply.first_omitted_entry_id, reply.first_omitted_size) == (big.entry_id, 1000)


async def test_limit_and_budget_together_whichever_yields_fewer_wins(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/limit"))
    stored = await append_in_order(memory, *(text(100, f"n{i}") for i in range(5)))
    newest_first = [s.entry_id for s in reversed(stored)]
    by_limit = await memory.list_memory(token_budget=1000, limit=2, token_counter=CHARS)
    assert [e.entry_id for e in by_limit.entries] == newest_first[:2]
    assert by_limit.stopped_by == m.STOPPED_BY_LIMIT
    by_budget = await memory.list_memory(token_budget=250, limit=4, token_counter=CHARS)
    assert [e.entry_id for e in by_budget.entries] == newest_first[:2]
    assert by_budget.stopped_by == m.STOPPED_BY_BUDGET
    # Both bind at the same entry: the limit is reported (it is checked first).
    both = await memory.list_memory(token_budget=200, limit=2, token_counter=CHARS)
    assert both.stopped_by == m.STOPPED_BY_LIMIT
    unbounded = await memory.list_memory()
    assert len(unbounded.entries) == 5
    assert unbounded.stopped_by == m.STOPPED_BY_NONE
    assert not unbounded.HasField("effective_token_budget")


async def test_the_server_cap_bounds_every_answer_and_says_so(start_server: StartServer) -> None:
    runner = await start_server("memory", RATION_MEMORY_LIST_LIMIT_CAP="3")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "list/cap")
        await memory.append(*(f"capped {i}" for i in range(5)))
        for limit in (0, 10):
            reply = await memory.list_memory(limit=limit)
            assert len(reply.entries) == 3
            assert reply.stopped_by == m.STOPPED_BY_LIMIT
            assert reply.omitted_count == 2


async def test_sizes_are_reported_in_the_requested_unit_and_default_to_o200k(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/units"))
    stored = (await memory.append("Grüße 🎉 from the deploy pipeline")).entries[0]
    default = await memory.list_memory(token_budget=1000)
    assert default.token_counter == m.TOKEN_COUNTER_O200K_BASE
    assert default.entries[0].size == stored.sizes.o200k_base
    for counter, expected in (
        (m.TOKEN_COUNTER_O200K_BASE, stored.sizes.o200k_base),
        (m.TOKEN_COUNTER_CL100K_BASE, stored.sizes.cl100k_base),
        (CHARS, stored.sizes.chars),
    ):
        reply = await memory.list_memory(token_budget=1000, token_counter=counter)
        assert (reply.token_counter, reply.entries[0].size, reply.total_tokens) == (
            counter,
            expected,
            expected,
        )


async def test_tag_filter_limits_the_candidates(shared_memory_channel: grpc.aio.Channel) -> None:
    memory = Memory(shared_memory_channel, new_id("list/tags"))
    reply = await memory.append(
        entry("tagged one", tags=["prefs"]),
        entry("untagged"),
        entry("tagged two", tags=["prefs", "travel"]),
    )
    tagged = {e.entry_id for e in reply.entries if "prefs" in e.tags}
    listed = await memory.list_memory(tag="prefs")
    assert {e.entry_id for e in listed.entries} == tagged
    assert listed.candidate_count == 2
    assert (await memory.list_memory(tag="missing")).candidate_count == 0


async def test_a_pinned_revision_hides_later_writes_and_forgotten_entries_leave(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/pinned"))
    first = (await memory.append("at run start")).entries[0]
    pinned = await memory.head()
    later = (await memory.append("written during the run")).entries[0]
    revised = (await memory.revise(first.entry_id, "revised during the run")).entry
    at_start = await memory.list_memory(revision=pinned)
    assert [(e.entry_id, e.entry_version_id, e.content) for e in at_start.entries] == [
        (first.entry_id, first.entry_version_id, "at run start")
    ]
    assert at_start.revision == pinned
    head = await memory.list_memory()
    assert {e.entry_version_id for e in head.entries} == {
        later.entry_version_id,
        revised.entry_version_id,
    }
    await memory.forget(later.entry_id)
    assert [e.entry_id for e in (await memory.list_memory()).entries] == [first.entry_id]
    error = await rpc_error(memory.list_memory(revision=await memory.head() + 1))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "REVISION_NOT_FOUND")


async def test_expired_entries_never_surface(
    shared_memory_channel: grpc.aio.Channel, shared_db: asyncpg.Connection
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/ttl"))
    soon = datetime.now(UTC) + timedelta(seconds=30)
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(soon)
    reply = await memory.append(entry("lasting"), entry("short-lived", expires_at=stamp))
    lasting, short = reply.entries
    # Expiry is judged by the database clock. Instead of waiting for it, move the stored
    # expiry into the past before anything read the revision (versions are immutable, so the
    # server may cache what it read; tests/unit/test_memory_candidates.py covers an index
    # cached before its entries expire).
    await shared_db.execute(
        "UPDATE memory.entry_versions SET expires_at = now() - interval '1 second'"
        " WHERE entry_version_id = $1",
        short.entry_version_id,
    )
    for revision in (None, 1):
        fields = {} if revision is None else {"revision": revision}
        listed = await memory.list_memory(**fields)
        assert [e.entry_id for e in listed.entries] == [lasting.entry_id]
        assert listed.candidate_count == 1
    for mode in (m.SEARCH_MODE_FILTER, m.SEARCH_MODE_SEMANTIC):
        hits = (await memory.search(mode=mode, query="short-lived")).hits
        assert [h.entry.entry_id for h in hits] == [lasting.entry_id]
    error = await rpc_error(memory.version(short.entry_version_id))
    assert error.reason == "ENTRY_NOT_FOUND"


async def test_unknown_and_malformed_memories_read_as_empty(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    await Memory(shared_memory_channel, new_id("list/exists")).append("something")
    empty = [
        await Memory(shared_memory_channel, ref).list_memory(token_budget=100)
        for ref in (new_id("list/absent"), "", "a/../b", "bad\x00ref", "x" * 300)
    ]
    assert all(len(r.entries) == 0 and r.revision == 0 for r in empty)
    assert len({r.SerializeToString(deterministic=True) for r in empty}) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"token_budget": -5}, "token_budget"),
        ({"token_budget": 10**12}, "token_budget"),
        ({"rank": m.RANK_RELEVANCE}, "query"),
        ({"query": "q" * 4097}, "query"),
        ({"token_counter": 42}, "token_counter"),
        ({"rank": 9}, "rank"),
        ({"tag": "t" * 65}, "tag"),
        ({"revision": 0}, "revision"),
    ],
)
async def test_bad_list_requests_are_refused_with_field_violations(
    shared_memory_channel: grpc.aio.Channel, fields: dict[str, object], field: str
) -> None:
    error = await rpc_error(Memory(shared_memory_channel, new_id("list/bad")).list_memory(**fields))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    violations = error.details[0].field_violations
    assert [v.field for v in violations] == [field]


async def test_concurrent_first_reads_of_a_revision_agree(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("list/concurrent"))
    await memory.append(*(f"note {i}" for i in range(40)))
    replies = await asyncio.gather(
        *(memory.list_memory(token_budget=50, token_counter=CHARS) for _ in range(8))
    )
    assert len({r.SerializeToString(deterministic=True) for r in replies}) == 1


async def test_list_metrics_count_tokens_utilisation_and_omissions_without_ids(
    start_server: StartServer,
) -> None:
    runner = await start_server("memory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "list/metrics")
        await append_in_order(memory, text(100, "a"), text(100, "b"), text(100, "c"))
        await memory.list_memory(token_budget=250, token_counter=CHARS)  # 200 of 250, 1 left
        await memory.list_memory(limit=1, token_counter=CHARS)  # no budget: no utilisation
    url = f"http://127.0.0.1:{runner.metrics_port}/metrics"
    page = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert 'ration_memory_list_requests_total{rank="recency",stopped_by="budget"} 1.0' in page
    assert 'ration_memory_list_requests_total{rank="recency",stopped_by="limit"} 1.0' in page
    assert "ration_memory_list_returned_chars_count 2.0" in page
    assert "ration_memory_list_returned_chars_sum 300.0" in page
    assert 'ration_memory_list_returned_tokens_count{token_counter="o200k_base"} 0.0' in page
    assert "ration_memory_list_omitted_entries_total 3.0" in page
    assert "ration_memory_list_budget_utilization_ratio_count 1.0" in page
    assert "ration_memory_list_budget_utilization_ratio_sum 0.8" in page
    assert 'ration_memory_list_budget_utilization_ratio_bucket{le="0.8"} 1.0' in page
    for private in ("list/metrics", "mem_ent_", "mem_ver_"):
        assert private not in page
