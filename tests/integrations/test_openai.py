"""OpenAI SDK: a real AsyncOpenAI against the fake provider, budgeted by a real ration server."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from ration_client import BudgetClient, BudgetPolicy, ModelPatterns, ReserveMode
from ration_client.integrations import BudgetGuard, PriceCatalog, Refusal
from ration_client.integrations.openai import (
    BudgetExhaustedError,
    ModelDeniedError,
    budgeted,
)
from tests.integrations.ledger import (
    assert_ledger_is_the_bill,
    assert_nothing_spent,
    cancel_mid_stream,
)
from tests.support.fake_llm import FakeLLM

MODEL = "gpt-4o"
CATALOG = PriceCatalog(provider_id="openai")


def openai_client(fake: FakeLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.openai_url, api_key="test", max_retries=0)


async def test_agent_loop_is_stopped_at_exactly_the_token_limit(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    """Under UP_TO the last call is sent with max_tokens cut to what is left, so the run spends
    its limit to the token; the next call is refused before reaching the provider."""
    limit = 400
    await budget.open_run("loop", project_id="p", policy=BudgetPolicy(max_tokens=limit))
    fake_llm.reply_tokens = 1000  # every reply runs to its max_tokens
    guard = BudgetGuard(budget, "loop", prices=CATALOG, mode=ReserveMode.UP_TO)
    client = budgeted(openai_client(fake_llm), guard)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan the trip."}]
    sent: list[int] = []

    async def agent() -> BudgetExhaustedError:
        while True:
            try:
                reply = await client.chat.completions.create(
                    model=MODEL, messages=messages, max_tokens=60
                )
            except BudgetExhaustedError as stopped:
                return stopped
            sent.append(fake_llm.received[-1].body["max_tokens"])
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            messages.append({"role": "user", "content": "Go on."})

    refused = await agent()
    assert isinstance(refused, openai.RateLimitError)
    assert refused.kind is Refusal.EXHAUSTED
    assert sent[:-1] == [60] * (len(sent) - 1)
    assert 0 < sent[-1] < 60  # the last call was capped to the grant
    consumed = await assert_ledger_is_the_bill(budget, "loop", fake_llm, MODEL, CATALOG)
    assert consumed == limit
    assert fake_llm.requests == len(sent)


async def test_responses_loop_stops_when_the_worst_case_no_longer_fits(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    await budget.open_run("resp", project_id="p", policy=BudgetPolicy(max_tokens=200))
    fake_llm.reply_tokens = 25
    client = budgeted(openai_client(fake_llm), BudgetGuard(budget, "resp", prices=CATALOG))
    transcript = "Summarise."
    calls = 0
    while True:
        try:
            reply = await client.responses.create(
                model=MODEL, input=transcript, max_output_tokens=50
            )
        except BudgetExhaustedError:
            break
        calls += 1
        transcript += reply.output_text
    consumed = await assert_ledger_is_the_bill(budget, "resp", fake_llm, MODEL, CATALOG)
    assert calls == fake_llm.requests >= 2
    prompt_next = fake_llm.billed[-1].input_tokens + 25  # the refused call's prompt, at least
    assert consumed + prompt_next + 50 > 200  # refused because its worst case did not fit


async def test_a_denied_model_is_refused_before_any_request(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    policy = BudgetPolicy(max_tokens=10_000, model_allow=ModelPatterns(patterns=["gpt-4o-mini"]))
    await budget.open_run("deny", project_id="p", policy=policy)
    client = budgeted(openai_client(fake_llm), BudgetGuard(budget, "deny", prices=CATALOG))
    with pytest.raises(ModelDeniedError) as denied:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )
    assert isinstance(denied.value, openai.PermissionDeniedError)
    assert denied.value.status_code == 403
    assert denied.value.refusal.reason == "BUDGET_MODEL_DENIED"
    assert denied.value.refusal.metadata["model"] == MODEL
    with pytest.raises(ModelDeniedError):
        await client.responses.create(model=MODEL, input="hi", max_output_tokens=10)
    assert fake_llm.requests == 0


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_stream_consumes_its_reported_usage(
    budget: BudgetClient, fake_llm: FakeLLM, api: str
) -> None:
    await budget.open_run("s", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(openai_client(fake_llm), BudgetGuard(budget, "s", prices=CATALOG))
    if api == "chat":
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=30, stream=True
        )
        assert fake_llm.received[0].body["stream_options"] == {"include_usage": True}
    else:
        stream = await client.responses.create(
            model=MODEL, input="hi", max_output_tokens=30, stream=True
        )
    chunks = [chunk async for chunk in stream]
    assert len(chunks) > fake_llm.reply_tokens
    consumed = await assert_ledger_is_the_bill(budget, "s", fake_llm, MODEL, CATALOG)
    assert consumed == fake_llm.billed[0].input_tokens + 20


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_cancelling_mid_stream_releases_the_hold(
    budget: BudgetClient, fake_llm: FakeLLM, api: str
) -> None:
    await budget.open_run("c", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(openai_client(fake_llm), BudgetGuard(budget, "c", prices=CATALOG))

    async def read(first: asyncio.Event) -> None:
        if api == "chat":
            stream: Any = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=100,
                stream=True,
            )
        else:
            stream = await client.responses.create(
                model=MODEL, input="hi", max_output_tokens=100, stream=True
            )
        async for _ in stream:
            first.set()

    await cancel_mid_stream(budget, "c", fake_llm, read)


async def test_a_provider_error_releases_the_hold(budget: BudgetClient, fake_llm: FakeLLM) -> None:
    await budget.open_run("e", project_id="p", policy=BudgetPolicy(max_tokens=1000))
    client = budgeted(openai_client(fake_llm), BudgetGuard(budget, "e", prices=CATALOG))
    fake_llm.fail_with = 500
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )
    await assert_nothing_spent(budget, "e")
    assert fake_llm.requests == 1
