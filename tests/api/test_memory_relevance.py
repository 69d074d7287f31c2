"""Relevance: SearchMemory's semantic ranking, RANK_RELEVANCE on top of it, and no embedder.

Tests on the default server share the module's, each on a memory ref of its own; those that
configure a server, or count rows across the database, start their own."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TypedDict

import asyncpg
import grpc
import numpy as np
import pytest

from memory_service.adapters.embedder import Embedder, EmbedderFiles, from_bytes
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as pb
from ration.memory.v1 import memory_service_pb2_grpc
from tests.support.adapters import shared_embedder
from tests.support.errors import rpc_error
from tests.support.ids import new_id
from tests.support.memory import Memory, entry
from tests.support.servers import StartServer

RELEVANT = "The customer prefers a window seat on long-haul flights."
OTHERS = (
    "Quarterly revenue grew twelve percent in Europe.",
    "The staging cluster was upgraded to Kubernetes last night.",
    "Lunch orders for the offsite are due by Friday noon.",
)
# A paraphrase: no content word in common with RELEVANT, so only meaning can find it.
PARAPHRASE = "Where does the client like to sit when travelling by plane?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return shared_embedder()


async def crafted(memory: Memory) -> list[m.EntryVersion]:
    """The relevant entry is the oldest, so recency ranks it last."""
    return [(await memory.append(text)).entries[0] for text in (RELEVANT, *OTHERS)]


async def test_relevance_ranks_the_paraphrased_entry_first_where_recency_does_not(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("relevance/crafted"))
    stored = await crafted(memory)
    relevant = stored[0]
    budget = {"token_budget": 120, "token_counter": m.TOKEN_COUNTER_CHARS}
    by_relevance = await memory.list_memory(rank=m.RANK_RELEVANCE, query=PARAPHRASE, **budget)
    by_recency = await memory.list_memory(rank=m.RANK_RECENCY, **budget)
    assert by_relevance.entries[0].entry_id == relevant.entry_id
    assert by_recency.entries[0].entry_id == stored[-1].entry_id
    assert relevant.entry_id not in [e.entry_id for e in by_recency.entries]
    # Both are budgeted the same way: whole entries, within 120, stopped by the next one.
    for reply in (by_relevance, by_recency):
        assert reply.total_tokens == sum(len(e.content) for e in reply.entries) <= 120
        assert len(reply.entries) == 2
        assert reply.stopped_by == m.STOPPED_BY_BUDGET
        assert (reply.candidate_count, reply.omitted_count) == (4, 2)
        assert reply.total_tokens + reply.first_omitted_size > 120
    # RANK_RELEVANCE is exactly SearchMemory's semantic ranking of the same candidates.
    search = await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=PARAPHRASE, limit=100)
    ranked = [h.entry.entry_id for h in search.hits]
    unbudgeted = await memory.list_memory(rank=m.RANK_RELEVANCE, query=PARAPHRASE)
    assert [e.entry_id for e in unbudgeted.entries] == ranked
    assert ranked[0] == relevant.entry_id
    scores = [h.score for h in search.hits]
    assert scores == sorted(scores, reverse=True)


async def test_an_exact_name_is_lifted_by_the_lexical_signal(
    shared_memory_channel: grpc.aio.Channel, embedder: Embedder
) -> None:
    host = "Host tea-kettle-7 runs the nightly cache warmup."
    brewing = "Brewing a cup of tea with a kettle of boiling water."
    query = "tea-kettle-7"
    # By meaning alone the model prefers the entry about tea: only full-text search knows the
    # host name, and fusion puts the exact match first.
    vector = embedder.embed(query)
    assert float(vector @ embedder.embed(brewing)) > float(vector @ embedder.embed(host))
    memory = Memory(shared_memory_channel, new_id("relevance/names"))
    named, _, _ = (await memory.append(host, brewing, "Green tea is served at noon.")).entries
    hits = (await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=query)).hits
    assert hits[0].entry.entry_id == named.entry_id
    listed = await memory.list_memory(rank=m.RANK_RELEVANCE, query=query, limit=1)
    assert [e.entry_id for e in listed.entries] == [named.entry_id]


async def test_filter_search_narrows_by_tags_and_kind_newest_first(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("relevance/filter"))
    old = (await memory.append(entry("old pref", kind="preference", tags=["ui"]))).entries[0]
    await memory.append(entry("a fact", kind="fact", tags=["ui"]))
    new = (await memory.append(entry("new pref", kind="preference", tags=["ui", "x"]))).entries[0]
    hits = (await memory.search(mode=m.SEARCH_MODE_FILTER, tags=["ui"], kind="preference")).hits
    assert [h.entry.entry_id for h in hits] == [new.entry_id, old.entry_id]
    assert all(h.score == 0 for h in hits)
    only = (await memory.search(mode=m.SEARCH_MODE_FILTER, tags=["ui", "x"])).hits
    assert [h.entry.entry_id for h in only] == [new.entry_id]
    limited = (await memory.search(mode=m.SEARCH_MODE_FILTER, limit=1)).hits
    assert [h.entry.entry_id for h in limited] == [new.entry_id]
    nothing = Memory(shared_memory_channel, new_id("relevance/none"))
    assert (await nothing.search(mode=2)).revision == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"mode": m.SEARCH_MODE_UNSPECIFIED}, "mode"),
        ({"mode": 7}, "mode"),
        ({"mode": m.SEARCH_MODE_SEMANTIC}, "query"),
        ({"mode": m.SEARCH_MODE_FILTER, "limit": 101}, "limit"),
        ({"mode": m.SEARCH_MODE_FILTER, "limit": -1}, "limit"),
        ({"mode": m.SEARCH_MODE_FILTER, "tags": [""]}, "tags[0]"),
        ({"mode": m.SEARCH_MODE_FILTER, "revision": 0}, "revision"),
    ],
)
async def test_bad_search_requests_are_refused(
    shared_memory_channel: grpc.aio.Channel, fields: dict[str, object], field: str
) -> None:
    error = await rpc_error(Memory(shared_memory_channel, new_id("relevance/bad")).search(**fields))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    assert [v.field for v in error.details[0].field_violations] == [field]


async def capabilities(channel: grpc.aio.Channel) -> tuple[pb.GetCapabilitiesResponse, dict]:  # type: ignore[type-arg]
    stub = memory_service_pb2_grpc.MemoryServiceStub(channel)  # type: ignore[no-untyped-call]
    reply = await stub.GetCapabilities(pb.GetCapabilitiesRequest())
    return reply, json.loads(reply.capabilities_json)["memory"]


async def test_with_an_embedder_both_modes_and_the_injection_budget_are_advertised(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    reply, document = await capabilities(shared_memory_channel)
    assert document["search"] == {"supported": True, "modes": ["semantic", "filter"]}
    assert document["injectionBudget"] == {"supported": True, "tokenCounter": "o200k_base"}
    assert list(reply.search.modes) == ["semantic", "filter"]
    assert reply.injection_budget.supported
    assert reply.injection_budget.token_counter == "o200k_base"


async def test_without_an_embedder_semantic_is_dropped_and_relevance_refused(
    start_server: StartServer,
) -> None:
    runner = await start_server(
        "memory", RATION_MEMORY_EMBEDDER="off", RATION_MEMORY_TOKEN_COUNTER="chars"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        reply, document = await capabilities(channel)
        assert document["search"] == {"supported": True, "modes": ["filter"]}
        assert document["injectionBudget"] == {"supported": True, "tokenCounter": "chars"}
        assert list(reply.search.modes) == ["filter"]
        memory = Memory(channel, "relevance/off")
        await crafted(memory)
        for call in (
            memory.list_memory(rank=m.RANK_RELEVANCE, query=PARAPHRASE, token_budget=120),
            memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=PARAPHRASE),
            # Refused before the memory is even looked up: no fabricated ranking, ever.
            Memory(channel, "relevance/absent").list_memory(rank=m.RANK_RELEVANCE, query="q"),
        ):
            error = await rpc_error(call)
            assert (error.code, error.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "RELEVANCE_UNAVAILABLE",
            )
        listed = await memory.list_memory(token_budget=120)
        assert listed.token_counter == m.TOKEN_COUNTER_CHARS
        assert len(listed.entries) == 2
        hits = (await memory.search(mode=m.SEARCH_MODE_FILTER)).hits
        assert len(hits) == 4


async def test_entries_written_without_an_embedder_are_embedded_when_first_ranked(
    start_server: StartServer, db: asyncpg.Connection, embedder: Embedder
) -> None:
    off = await start_server("memory", RATION_MEMORY_EMBEDDER="off")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{off.port}") as channel:
        stored = await crafted(Memory(channel, "relevance/backfill"))
    assert await db.fetchval("SELECT count(embedding) FROM memory.entry_versions") == 0
    on = await start_server("memory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{on.port}") as channel:
        memory = Memory(channel, "relevance/backfill")
        reply = await memory.list_memory(rank=m.RANK_RELEVANCE, query=PARAPHRASE, limit=1)
        assert reply.entries[0].entry_id == stored[0].entry_id
    rows = await db.fetch("SELECT content, embedding FROM memory.entry_versions")
    assert len(rows) == 4
    for row in rows:
        assert np.array_equal(from_bytes(row["embedding"]), embedder.embed(row["content"]))


class ListArgs(TypedDict, total=False):
    """The ListMemory fields a case sets."""

    rank: m.Rank
    query: str
    token_budget: int
    revision: int


async def test_a_warm_server_answers_exactly_like_a_cold_one_across_writes(
    start_server: StartServer,
) -> None:
    warm = await start_server("memory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{warm.port}") as channel:
        memory = Memory(channel, "relevance/warm")
        stored = await crafted(memory)
        requests: list[ListArgs] = [
            {"rank": m.RANK_RELEVANCE, "query": PARAPHRASE, "token_budget": 40},
            {"rank": m.RANK_RELEVANCE, "query": "kubernetes upgrade"},
            {"token_budget": 30},
        ]
        for request in requests:  # fills the warm server's indexes, vectors and contents
            await memory.list_memory(**request)
        await memory.append("Window seats matter to this traveller on every flight.")
        await memory.revise(stored[1].entry_id, "Revenue in Europe grew by a tenth.")
        await memory.forget(stored[2].entry_id)
        pinned = 2
        answers = []
        for request in requests + [{**r, "revision": pinned} for r in requests]:
            first = (await memory.list_memory(**request)).SerializeToString()
            # Asked again, it is answered from what the first call cached: the same bytes.
            assert (await memory.list_memory(**request)).SerializeToString() == first
            answers.append(first)
        hits = await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=PARAPHRASE)
    cold = await start_server("memory", RATION_MEMORY_CACHE_ENTRIES="0")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cold.port}") as channel:
        memory = Memory(channel, "relevance/warm")
        for request, answer in zip(
            requests + [{**r, "revision": pinned} for r in requests], answers, strict=True
        ):
            assert (await memory.list_memory(**request)).SerializeToString() == answer, request
        again = await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query=PARAPHRASE)
        assert again.SerializeToString() == hits.SerializeToString()


async def test_a_model_file_that_fails_verification_turns_semantic_off_and_says_why(
    start_server: StartServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    files = EmbedderFiles.packaged()
    tampered = tmp_path / "model.onnx"
    tampered.write_bytes(files.model.read_bytes()[:-16] + bytes(16))
    monkeypatch.setattr(
        EmbedderFiles, "packaged", classmethod(lambda cls: cls(tampered, files.tokenizer))
    )
    with caplog.at_level(logging.WARNING, logger="memory_service.definition"):
        runner = await start_server("memory")
    [record] = [r for r in caplog.records if "embedder unavailable" in r.getMessage()]
    assert "not the pinned" in record.reason  # type: ignore[attr-defined]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        _, document = await capabilities(channel)
        assert document["search"] == {"supported": True, "modes": ["filter"]}
        error = await rpc_error(
            Memory(channel, "relevance/tampered").list_memory(rank=m.RANK_RELEVANCE, query="q")
        )
        assert error.reason == "RELEVANCE_UNAVAILABLE"
