"""RationSession satisfies the Agents SDK Session behaviour on a real memory service: add,
get (token-budgeted), pop, clear, secrets redacted before storage, and a real Runner using it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from ration_client import MemoryClient, TokenCounter
from ration_client.integrations.agents import RationSession
from tests.support.fake_openai import FakeOpenAI, FakeOpenAIServer
from tests.support.servers import StartServer

SECRET = "sk-live-session-0123456789"
set_tracing_disabled(True)  # the SDK would export traces to OpenAI


@pytest.fixture
async def memory(start_server: StartServer) -> AsyncIterator[MemoryClient]:
    runner = await start_server("memory")
    async with MemoryClient(f"127.0.0.1:{runner.port}") as client:
        yield client


def message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def session_of(memory: MemoryClient, **options: Any) -> RationSession:
    return RationSession(f"s-{uuid.uuid4().hex[:8]}", memory, **options)


async def test_add_get_pop_and_clear_keep_the_conversation_order(memory: MemoryClient) -> None:
    session = session_of(memory)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    first = [message("user", "one"), message("assistant", "two")]
    await session.add_items(first)
    await session.add_items([message("user", "three")])
    assert await session.get_items() == [*first, message("user", "three")]
    assert await session.get_items(limit=2) == [
        message("assistant", "two"),
        message("user", "three"),
    ]
    assert await session.pop_item() == message("user", "three")
    assert await session.get_items() == first
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_a_batch_keeps_its_order_past_one_append(memory: MemoryClient) -> None:
    session = session_of(memory)
    items = [message("user", f"item {i}") for i in range(150)]  # two AppendEntries calls
    await session.add_items(items)
    assert await session.get_items() == items


async def test_secrets_are_redacted_before_anything_is_stored(memory: MemoryClient) -> None:
    quoted = 'pass"word\\with-escapes-42'
    session = session_of(memory, secrets={"api_key": SECRET, "db": quoted})
    await session.add_items([message("user", f"my key is {SECRET} and db {quoted}")])
    (item,) = await session.get_items()
    assert item["content"] == "my key is [REDACTED:api_key] and db [REDACTED:db.json]"
    stored = await memory.list(session.memory_ref)
    assert SECRET not in stored.entries[0].content
    assert "[REDACTED:api_key]" in stored.entries[0].content


async def test_reads_are_the_newest_whole_items_within_the_token_budget(
    memory: MemoryClient,
) -> None:
    session = session_of(memory, token_budget=60, token_counter=TokenCounter.CHARS)
    items = [message("user", f"message number {i}") for i in range(5)]
    await session.add_items(items)
    sizes = [len(f'{{"role": "user", "content": "message number {i}"}}') for i in range(5)]
    assert sizes[-1] <= 60 < sizes[-1] + sizes[-2]
    assert await session.get_items() == items[-1:]


async def test_a_runner_keeps_its_history_in_the_session(memory: MemoryClient) -> None:
    session = session_of(memory)
    with FakeOpenAIServer(FakeOpenAI(output_tokens=3)) as fake:
        client = AsyncOpenAI(base_url=fake.url, api_key="test-key", max_retries=0)
        agent = Agent(name="chat", model=OpenAIChatCompletionsModel("gpt-4o-mini", client))
        await Runner.run(agent, "first question", session=session)
        await Runner.run(agent, "second question", session=session)
    history = await session.get_items()
    said = [item.get("content") for item in history if item.get("role") == "user"]
    assert said == ["first question", "second question"]
    second_prompt = [m["content"] for m in fake.requests[1]["messages"] if m["role"] == "user"]
    assert second_prompt == ["first question", "second question"]


async def test_session_settings_limit_applies_when_no_limit_is_passed(
    memory: MemoryClient,
) -> None:
    session = session_of(memory, session_settings=SessionSettings(limit=1))
    await session.add_items([message("user", "old"), message("user", "new")])
    assert await session.get_items() == [message("user", "new")]
    assert len(await session.get_items(limit=5)) == 2
