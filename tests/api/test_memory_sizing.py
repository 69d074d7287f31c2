"""A max-size entry of every hostile kind appends within the client's default deadline, sized
exactly like tiktoken (issue 17 item 4: the pure-Python BPE took 450 s on one of them)."""

from __future__ import annotations

import inspect

import pytest

from bench.sizing import worst_case_texts
from memory_service.usecases.settings import MemorySettings
from ration.memory.v1 import memory_pb2
from ration_client import MemoryClient
from servicekit.settings import Env
from tests.support.servers import StartServer
from tests.support.tokens import fresh_size

MAX_ENTRY_BYTES = MemorySettings.from_env(Env({})).max_entry_size_bytes
TEXTS = worst_case_texts(MAX_ENTRY_BYTES)


def test_the_worst_cases_are_max_size_entries_without_word_breaks() -> None:
    assert MAX_ENTRY_BYTES == 64 * 1024
    for text in TEXTS.values():
        assert MAX_ENTRY_BYTES - 4 < len(text.encode()) <= MAX_ENTRY_BYTES
        assert " " not in text


@pytest.mark.parametrize("kind", sorted(TEXTS))
async def test_a_max_size_entry_appends_within_the_clients_default_deadline(
    start_server: StartServer, kind: str
) -> None:
    deadline = inspect.signature(MemoryClient).parameters["timeout"].default
    assert deadline == 5.0  # the client's default; the call below does not override it
    runner = await start_server("memory")
    async with MemoryClient(f"127.0.0.1:{runner.port}") as memory:
        reply = await memory.append(f"sizing/{kind}", [TEXTS[kind]])
    (stored,) = reply.entries
    assert stored.sizes.chars == len(stored.content)
    assert stored.sizes.o200k_base == fresh_size(
        memory_pb2.TOKEN_COUNTER_O200K_BASE, stored.content
    )
    assert stored.sizes.cl100k_base == fresh_size(
        memory_pb2.TOKEN_COUNTER_CL100K_BASE, stored.content
    )
