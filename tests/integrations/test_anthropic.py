"""Anthropic SDK: a real AsyncAnthropic against the fake provider, budgeted by a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest

from ration_client import BudgetClient, BudgetPolicy, ReserveMode
from ration_client.integrations import BudgetGuard, PriceCatalog, Refusal
from ration_client.integrations.anthropic import BudgetExhaustedError, ModelDeniedError, budgeted
from ration_client.integrations.tokens import count_anthropic_prompt
from tests.integrations.ledger import (
    assert_ledger_is_the_bill,
    assert_nothing_spent,
    cancel_mid_stream,
)
from tests.support.fake_llm import FakeLLM

MODEL = "claude-sonnet-4-5"
CATALOG = PriceCatalog(provider_id="anthropic")


def anthropic_client(fake: FakeLLM) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.anthropic_url, api_key="test", max_retries=0)


async def test_agent_loop_is_stopped_when_the_budget_cannot_hold_the_next_call(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    """UP_TO: calls shrink to what is left, and the loop stops at the call whose prompt no
    longer fits; what was consumed is exactly what the provider billed."""
    limit = 280
    await budget.open_run("loop", project_id="p", policy=BudgetPolicy(max_tokens=limit))
    fake_llm.reply_tokens = 1000
    guard = BudgetGuard(budget, "loop", prices=CATALOG, mode=ReserveMode.UP_TO)
    client = budgeted(anthropic_client(fake_llm), guard)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan the trip."}]
    sent: list[int] = []

    async def agent() -> BudgetExhaustedError:
        while True:
            try:
                reply = await client.messages.create(
                    model=MODEL, system="Be brief.", messages=messages, max_tokens=80
                )
            except BudgetExhaustedError as stopped:
                return stopped
            sent.append(fake_llm.received[-1].body["max_tokens"])
            messages.append({"role": "assistant", "content": reply.content[0].text})
            messages.append({"role": "user", "content": "Go on."})

    refused = await agent()
    assert isinstance(refused, anthropic.RateLimitError)
    assert refused.kind is Refusal.EXHAUSTED
    assert sent[0] == 80
    assert sent[-1] < 80  # the last call was capped to the grant
    consumed = await assert_ledger_is_the_bill(budget, "loop", fake_llm, MODEL, CATALOG)
    assert consumed <= limit
    next_prompt = count_anthropic_prompt(messages, MODEL, system="Be brief.")
    assert limit - consumed <= next_prompt  # stopped exactly when the next prompt did not fit


async def test_a_denied_model_is_refused_before_any_request(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    policy = BudgetPolicy(max_tokens=10_000, model_deny=["claude-sonnet-*"])
    await budget.open_run("deny", project_id="p", policy=policy)
    client = budgeted(anthropic_client(fake_llm), BudgetGuard(budget, "deny", prices=CATALOG))
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ModelDeniedError) as denied:
        await client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    assert isinstance(denied.value, anthropic.PermissionDeniedError)
    assert denied.value.refusal.metadata["model"] == MODEL
    with pytest.raises(ModelDeniedError):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=messages):
            pass
    assert fake_llm.requests == 0


async def test_streams_consume_their_reported_usage(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    await budget.open_run("s", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(anthropic_client(fake_llm), BudgetGuard(budget, "s", prices=CATALOG))
    messages = [{"role": "user", "content": "hi"}]
    async with client.messages.stream(model=MODEL, max_tokens=30, messages=messages) as stream:
        text = "".join([piece async for piece in stream.text_stream])
    assert text == " tok" * 20
    events = await client.messages.create(
        model=MODEL, max_tokens=30, messages=messages, stream=True
    )
    kinds = [event.type async for event in events]
    assert kinds[-1] == "message_stop"
    await assert_ledger_is_the_bill(budget, "s", fake_llm, MODEL, CATALOG)


@pytest.mark.parametrize("how", ["stream_manager", "stream_true"])
async def test_cancelling_mid_stream_releases_the_hold(
    budget: BudgetClient, fake_llm: FakeLLM, how: str
) -> None:
    await budget.open_run("c", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(anthropic_client(fake_llm), BudgetGuard(budget, "c", prices=CATALOG))
    messages = [{"role": "user", "content": "hi"}]

    async def read(first: asyncio.Event) -> None:
        if how == "stream_manager":
            async with client.messages.stream(
                model=MODEL, max_tokens=100, messages=messages
            ) as stream:
                async for _ in stream.text_stream:
                    first.set()
        else:
            events = await client.messages.create(
                model=MODEL, max_tokens=100, messages=messages, stream=True
            )
            async for event in events:
                if event.type == "content_block_delta":
                    first.set()

    await cancel_mid_stream(budget, "c", fake_llm, read)


async def test_a_provider_error_releases_the_hold(budget: BudgetClient, fake_llm: FakeLLM) -> None:
    await budget.open_run("e", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(anthropic_client(fake_llm), BudgetGuard(budget, "e", prices=CATALOG))
    fake_llm.fail_with = 500
    with pytest.raises(anthropic.InternalServerError):
        await client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    await assert_nothing_spent(budget, "e")
