"""RationStore passes the BaseStore behaviours on a real memory service: put/get/search/
list_namespaces/delete, budgeted reads, secrets redacted at write, sync and async batches, and
a real LangGraph graph reading and writing it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ration_client import MemoryClient, TokenCounter
from ration_client.integrations.langgraph import RationStore
from tests.support.servers import StartServer

SECRET = "sk-live-store-0123456789"


@pytest.fixture
async def address(start_server: StartServer) -> str:
    runner = await start_server("memory")
    return f"127.0.0.1:{runner.port}"


@pytest.fixture
async def store(address: str) -> AsyncIterator[RationStore]:
    store = RationStore(address, prefix=f"lg-{uuid.uuid4().hex[:8]}", secrets={"key": SECRET})
    yield store
    await store.aclose()


async def test_put_get_update_and_delete_an_item(store: RationStore) -> None:
    ns = ("users", "alice")
    assert await store.aget(ns, "prefs") is None
    await store.aput(ns, "prefs", {"seat": "window", "meal": "veg"})
    first = await store.aget(ns, "prefs")
    assert first is not None
    assert (first.namespace, first.key, first.value) == (
        ns,
        "prefs",
        {"seat": "window", "meal": "veg"},
    )
    await store.aput(ns, "prefs", {"seat": "aisle"})
    second = await store.aget(ns, "prefs")
    assert second is not None
    assert second.value == {"seat": "aisle"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    await store.adelete(ns, "prefs")
    assert await store.aget(ns, "prefs") is None
    await store.aput(ns, "prefs", {"seat": "middle"})  # a deleted key comes back
    again = await store.aget(ns, "prefs")
    assert again is not None
    assert again.value == {"seat": "middle"}
    await store.adelete(ns, "never-written")  # deleting nothing is fine


async def test_keys_are_distinct_per_namespace(store: RationStore) -> None:
    await store.aput(("a", "x/y"), "k", {"v": 1})
    await store.aput(("a", "x", "y"), "k", {"v": 2})
    one, two = await store.aget(("a", "x/y"), "k"), await store.aget(("a", "x", "y"), "k")
    assert one is not None
    assert two is not None
    assert (one.value, two.value) == ({"v": 1}, {"v": 2})


async def test_search_filters_on_fields_and_ranks_by_relevance(store: RationStore) -> None:
    ns = ("docs",)
    await store.aput(ns, "1", {"text": "pelicans nest on the eastern shore", "kind": "bird"})
    await store.aput(ns, "2", {"text": "the release train leaves on thursdays", "kind": "ops"})
    await store.aput(ns, "3", {"text": "herons fish in the shallows", "kind": "bird", "n": 3})
    birds = await store.asearch(ns, filter={"kind": "bird"})
    assert sorted(item.key for item in birds) == ["1", "3"]
    assert [i.key for i in await store.asearch(ns, filter={"n": {"$gte": 3}})] == ["3"]
    newest = await store.asearch(ns, limit=2)
    assert [item.key for item in newest] == ["3", "2"]
    assert [i.key for i in await store.asearch(ns, limit=2, offset=2)] == ["1"]
    ranked = await store.asearch(ns, query="where do pelicans nest")
    assert ranked[0].key == "1"
    assert await store.asearch(("elsewhere",)) == []


async def test_reads_are_bounded_by_the_token_budget(address: str) -> None:
    store = RationStore(
        address, prefix="budgeted", token_budget=150, token_counter=TokenCounter.CHARS
    )
    for i in range(5):
        await store.aput(("log",), f"k{i}", {"line": f"entry number {i}"})
    found = await store.asearch(("log",))
    assert [item.key for item in found] == ["k4"]  # each is ~100 characters: one fits 150
    await store.aclose()


async def test_list_namespaces_by_prefix_suffix_and_depth(store: RationStore) -> None:
    for ns in [("users", "a", "prefs"), ("users", "b", "prefs"), ("users", "b", "notes"), ("org",)]:
        await store.aput(ns, "k", {"v": 1})
    assert await store.alist_namespaces(prefix=("users",)) == [
        ("users", "a", "prefs"),
        ("users", "b", "notes"),
        ("users", "b", "prefs"),
    ]
    assert await store.alist_namespaces(suffix=("prefs",)) == [
        ("users", "a", "prefs"),
        ("users", "b", "prefs"),
    ]
    assert await store.alist_namespaces(prefix=("users", "*"), max_depth=2) == [
        ("users", "a"),
        ("users", "b"),
    ]
    assert await store.alist_namespaces(limit=1, offset=1) == [("users", "a", "prefs")]


async def test_secrets_are_redacted_before_anything_is_stored(
    store: RationStore, address: str
) -> None:
    await store.aput(("ops",), "deploy", {"note": f"the key is {SECRET}"})
    item = await store.aget(("ops",), "deploy")
    assert item is not None
    assert item.value == {"note": "the key is [REDACTED:key]"}
    async with MemoryClient(address) as memory:
        stored = await memory.list(store.ref(("ops",)))
    assert SECRET not in stored.entries[0].content
    assert "[REDACTED:key]" in stored.entries[0].content


async def test_batches_run_in_order_async_and_sync(store: RationStore) -> None:
    ns = ("batch",)
    results = await store.abatch([PutOp(ns, "k", {"v": 1}), GetOp(ns, "k")])
    assert results[0] is None
    got = results[1]
    assert isinstance(got, Item)
    assert got.value == {"v": 1}

    def sync_use() -> Any:
        store.put(ns, "s", {"v": 2})
        return store.get(ns, "s")

    synced = await asyncio.to_thread(sync_use)
    assert synced is not None
    assert synced.value == {"v": 2}
    with pytest.raises(RuntimeError, match="abatch"):
        store.batch([GetOp(ns, "k")])


async def test_a_graph_node_reads_and_writes_the_store(store: RationStore) -> None:
    async def remember(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        seen = await store.aget(("graph",), "visits")
        count = 0 if seen is None else seen.value["count"]
        await store.aput(("graph",), "visits", {"count": count + 1})
        return {"messages": []}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=store)
    for _ in range(3):
        await graph.ainvoke({"messages": []})
    visits = await store.aget(("graph",), "visits")
    assert visits is not None
    assert visits.value == {"count": 3}
