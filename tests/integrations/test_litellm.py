"""LiteLLM: the real SDK (acompletion) against the fake provider with RationLogger installed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import litellm
import pytest

from ration_client import BudgetClient, BudgetPolicy, ModelPatterns, ReserveMode
from ration_client.integrations import PriceCatalog, Refusal
from ration_client.integrations.litellm import (
    BudgetExhaustedError,
    ModelDeniedError,
    RationLogger,
)
from tests.integrations.ledger import (
    assert_ledger_is_the_bill,
    assert_nothing_spent,
    cancel_mid_stream,
)
from tests.support.fake_llm import FakeLLM

MODEL = "gpt-4o"
CATALOG = PriceCatalog(provider_id="openai")


@pytest.fixture
def callbacks() -> Iterator[list[Any]]:
    """litellm.callbacks for one test, restored afterwards (it is process-global)."""
    saved = list(litellm.callbacks)
    litellm.callbacks = []
    try:
        yield litellm.callbacks
    finally:
        litellm.callbacks = saved


def install(callbacks: list[Any], logger: RationLogger) -> RationLogger:
    callbacks.append(logger)
    return logger


async def complete(fake: FakeLLM, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return await litellm.acompletion(
        model=f"openai/{MODEL}",
        api_base=fake.openai_url,
        api_key="test",
        messages=messages,
        num_retries=0,
        **kwargs,
    )


async def test_agent_loop_is_stopped_at_exactly_the_token_limit(
    budget: BudgetClient, fake_llm: FakeLLM, callbacks: list[Any]
) -> None:
    limit = 400
    await budget.open_run("loop", project_id="p", policy=BudgetPolicy(max_tokens=limit))
    fake_llm.reply_tokens = 1000
    logger = install(
        callbacks, RationLogger(budget, run_id="loop", prices=CATALOG, mode=ReserveMode.UP_TO)
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan the trip."}]
    sent: list[int] = []

    async def agent() -> BudgetExhaustedError:
        while True:
            try:
                reply = await complete(fake_llm, messages, max_tokens=60)
            except BudgetExhaustedError as stopped:
                return stopped
            sent.append(fake_llm.received[-1].body["max_tokens"])
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            messages.append({"role": "user", "content": "Go on."})

    refused = await agent()
    await logger.settled()
    assert isinstance(refused, litellm.BudgetExceededError)
    assert refused.kind is Refusal.EXHAUSTED
    assert 0 < sent[-1] < 60 == sent[0]
    consumed = await assert_ledger_is_the_bill(budget, "loop", fake_llm, MODEL, CATALOG)
    assert consumed == limit
    assert logger.open_holds == 0


async def test_a_denied_model_is_refused_before_any_request(
    budget: BudgetClient, fake_llm: FakeLLM, callbacks: list[Any]
) -> None:
    policy = BudgetPolicy(max_tokens=10_000, model_allow=ModelPatterns(patterns=["claude-*"]))
    await budget.open_run("deny", project_id="p", policy=policy)
    logger = install(callbacks, RationLogger(budget, prices=CATALOG))
    with pytest.raises(ModelDeniedError) as denied:
        await complete(
            fake_llm,
            [{"role": "user", "content": "hi"}],
            max_tokens=10,
            metadata={"ration_run_id": "deny"},
        )
    assert isinstance(denied.value, litellm.PermissionDeniedError)
    assert denied.value.refusal.metadata["model"] == MODEL
    await logger.settled()
    assert fake_llm.requests == 0


async def test_a_stream_consumes_its_reported_usage(
    budget: BudgetClient, fake_llm: FakeLLM, callbacks: list[Any]
) -> None:
    await budget.open_run("s", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    logger = install(callbacks, RationLogger(budget, run_id="s", prices=CATALOG))
    stream = await complete(
        fake_llm, [{"role": "user", "content": "hi"}], max_tokens=30, stream=True
    )
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    assert "".join(p or "" for p in pieces) == " tok" * 20
    await logger.settled()
    assert fake_llm.received[0].body["stream_options"] == {"include_usage": True}
    await assert_ledger_is_the_bill(budget, "s", fake_llm, MODEL, CATALOG)


async def test_cancelling_mid_stream_releases_the_hold(
    budget: BudgetClient, fake_llm: FakeLLM, callbacks: list[Any]
) -> None:
    await budget.open_run("c", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    logger = install(callbacks, RationLogger(budget, run_id="c", prices=CATALOG))

    async def read(first: asyncio.Event) -> None:
        stream = await complete(
            fake_llm, [{"role": "user", "content": "hi"}], max_tokens=100, stream=True
        )
        async for _ in stream:
            first.set()

    await cancel_mid_stream(budget, "c", fake_llm, read, settled=logger.settled)


async def test_a_provider_error_releases_the_hold(
    budget: BudgetClient, fake_llm: FakeLLM, callbacks: list[Any]
) -> None:
    await budget.open_run("e", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    logger = install(callbacks, RationLogger(budget, run_id="e", prices=CATALOG))
    fake_llm.fail_with = 500
    with pytest.raises(litellm.InternalServerError):
        await complete(fake_llm, [{"role": "user", "content": "hi"}], max_tokens=10)
    await logger.settled()
    await assert_nothing_spent(budget, "e")
