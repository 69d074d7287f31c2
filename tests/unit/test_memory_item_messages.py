"""MemoryItems: item messages per (version, size) and whole responses per answer object."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_service.api.item_messages import RESPONSES, MemoryItems
from memory_service.domain.commands import Rank
from memory_service.domain.records import Item, ListResult
from memory_service.domain.token_counters import TokenCounter
from ration.memory.v1 import memory_service_pb2


def _item(version: str, size: int) -> Item:
    return Item(
        entry_id="mem_ent_" + "a" * 32,
        entry_version_id=version,
        kind="fact",
        content="the deploy runs at noon",
        tags=("ops",),
        created_at=datetime(2030, 1, 1, tzinfo=UTC),
        size=size,
        metadata={"source": "standup"},
    )


def test_an_item_message_is_built_once_per_version_and_size() -> None:
    items = MemoryItems()
    first = items.message(_item("mem_ver_1", 5))
    assert items.message(_item("mem_ver_1", 5)) is first
    other_size = items.message(_item("mem_ver_1", 6))
    assert other_size is not first
    assert (first.size, other_size.size, first.metadata["source"]) == (5, 6, "standup")
    assert first.created_at.ToDatetime(tzinfo=UTC) == datetime(2030, 1, 1, tzinfo=UTC)


def test_a_response_is_reused_only_for_the_very_same_answer() -> None:
    items = MemoryItems()
    built: list[int] = []

    def build(total: int) -> memory_service_pb2.ListMemoryResponse:
        built.append(total)
        return memory_service_pb2.ListMemoryResponse(total_tokens=total)

    answer = ListResult(TokenCounter.CHARS, Rank.RECENCY, revision=3, total_tokens=7)
    equal = ListResult(TokenCounter.CHARS, Rank.RECENCY, revision=3, total_tokens=7)
    first = items.list_response(answer, lambda: build(7))
    assert items.list_response(answer, lambda: build(7)) is first
    assert items.list_response(equal, lambda: build(7)) is not first  # equal is not the same
    assert built == [7, 7]
    for n in range(RESPONSES):  # the bound evicts the oldest
        later = ListResult(TokenCounter.CHARS, Rank.RECENCY, total_tokens=n)
        items.list_response(later, lambda: build(0))
    assert items.list_response(answer, lambda: build(7)) is not first
