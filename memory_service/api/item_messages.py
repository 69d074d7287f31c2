"""MemoryItem messages, built once per entry version and size and reused by later responses."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from memory_service.domain.records import Item, ListResult
from ration.memory.v1 import memory_pb2, memory_service_pb2
from servicekit.timestamps import timestamp

# About half a kilobyte each for typical entries; far more than one response's worth.
DEFAULT_SIZE = 16384
# Whole responses, for answers that are returned again as the very same object.
RESPONSES = 256
# What an entry costs a response beyond its MemoryItem's own bytes, in either response: field
# tags and length prefixes (ListMemory 1 + 5 at most; SearchMemory twice that, plus the score's
# 9). An upper bound, so that summing wire sizes never underestimates.
ITEM_FRAMING_BYTES = 32


class MemoryItems:
    """An LRU of MemoryItem messages by (entry_version_id, size).

    Everything in a MemoryItem but its size is fixed by the entry version, which never
    changes, and version ids are server-generated and unique, so a message built for one
    response is right for every later one; building it is most of a ListMemory response's
    cost. Responses copy the cached messages (protobuf assignment copies), never share them.
    """

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        # Each message with its serialized size, measured once.
        self._messages: OrderedDict[tuple[str, int], tuple[memory_pb2.MemoryItem, int]] = (
            OrderedDict()
        )
        self._responses: OrderedDict[
            int, tuple[ListResult, memory_service_pb2.ListMemoryResponse]
        ] = OrderedDict()

    def list_response(
        self, answer: ListResult, build: Callable[[], memory_service_pb2.ListMemoryResponse]
    ) -> memory_service_pb2.ListMemoryResponse:
        """The response built for this very answer object, built once.

        A remembered ListMemory answer (domain/candidate_index.py) comes back as the same object for
        as long as it is exact, so its response is too. gRPC only serializes a response, so one
        message can serve any number of calls; the entry keeps `answer` alive, so its id is not
        reused while the entry exists.
        """
        key = id(answer)
        found = self._responses.get(key)
        if found is not None and found[0] is answer:
            self._responses.move_to_end(key)
            return found[1]
        message = build()
        self._responses[key] = (answer, message)
        if len(self._responses) > RESPONSES:
            self._responses.popitem(last=False)
        return message

    def message(self, item: Item) -> memory_pb2.MemoryItem:
        return self._built(item)[0]

    def wire_size(self, item: Item) -> int:
        """The bytes this entry adds to a ListMemory or SearchMemory response (at most)."""
        return self._built(item)[1] + ITEM_FRAMING_BYTES

    def _built(self, item: Item) -> tuple[memory_pb2.MemoryItem, int]:
        key = (item.entry_version_id, item.size)
        found = self._messages.get(key)
        if found is not None:
            self._messages.move_to_end(key)
            return found
        message = memory_pb2.MemoryItem(
            entry_id=item.entry_id,
            entry_version_id=item.entry_version_id,
            kind=item.kind,
            content=item.content,
            tags=list(item.tags),
            created_at=timestamp(item.created_at),
            size=item.size,
            metadata=dict(item.metadata),
        )
        found = self._messages[key] = (message, message.ByteSize())
        if len(self._messages) > self._size:
            self._messages.popitem(last=False)
        return found
