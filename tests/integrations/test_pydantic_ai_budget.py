"""pydantic-ai: a real agent loop (OpenAIChatModel against a fake OpenAI server) budgeted by a
real ration budget service through BudgetedModel: stopped by the budget, denied before any
request, released on cancellation mid-stream."""

from __future__ import annotations

import uuid

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ration_client import (
    BudgetClient,
    BudgetExhausted,
    Dimension,
    ModelDenied,
    Policy,
    ReserveMode,
)
from ration_client.integrations import Refusal
from ration_client.integrations.pydantic_ai import BudgetedModel, BudgetGuard, BudgetRefused
from tests.support.fake_llm import FakeLLM
from tests.support.fake_openai import (
    FakeOpenAI,
    FakeOpenAIServer,
    assert_ledger_is_the_report,
    held_then_cancelled,
)

MODEL = "gpt-4o-mini"
LOOKED_UP: list[int] = []


def agent_of(fake: FakeOpenAI, guard: BudgetGuard) -> Agent[None, str]:
    provider = OpenAIProvider(base_url=fake.url, api_key="test-key")
    model = BudgetedModel(OpenAIChatModel(MODEL, provider=provider), guard)
    agent = Agent(model, instructions="Look every step up.", retries=0)

    @agent.tool_plain
    def lookup(step: int) -> str:
        """Looks a step up."""
        LOOKED_UP.append(step)
        return f"step {step} looked up"

    return agent


async def test_an_agent_loop_stops_at_exactly_its_tool_call_limit(budget: BudgetClient) -> None:
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    policy = Policy(max_tokens=100_000, max_tool_calls=5)
    await budget.open_run(run_id, project_id="p", policy=policy)
    guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=100)
    LOOKED_UP.clear()
    with (
        FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake,
        pytest.raises(BudgetRefused) as refused,
    ):
        await agent_of(fake, guard).run("go")
    assert isinstance(refused.value, UsageLimitExceeded)  # pydantic-ai's own error type
    assert isinstance(refused.value.refusal, BudgetExhausted)
    assert refused.value.refusal.dimension is Dimension.TOOL_CALLS
    tools = (await budget.get_run(run_id)).status(Dimension.TOOL_CALLS)
    assert (tools.consumed, tools.limit, tools.held) == (5, 5, 0)
    assert LOOKED_UP == [0, 1, 2, 3, 4]  # the sixth tool call never ran
    assert len(fake.requests) == 6
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert all(r["max_completion_tokens"] <= 100 for r in fake.requests)


async def test_a_token_budget_stops_the_loop_with_the_ledger_equal_to_usage(
    budget: BudgetClient,
) -> None:
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=3_000))
    guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=100)
    with (
        FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake,
        pytest.raises(BudgetRefused) as refused,
    ):
        await agent_of(fake, guard).run("go")
    assert refused.value.kind is Refusal.EXHAUSTED
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert len(fake.requests) >= 2
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert tokens.consumed <= 3_000


async def test_a_denied_model_is_refused_before_any_request_reaches_the_provider(
    budget: BudgetClient,
) -> None:
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(model_allow=("claude-*",)))
    with FakeOpenAIServer(FakeOpenAI()) as fake, pytest.raises(BudgetRefused) as refused:
        await agent_of(fake, BudgetGuard(budget, run_id)).run("hello")
    assert refused.value.kind is Refusal.MODEL_DENIED
    assert isinstance(refused.value.refusal, ModelDenied)
    assert fake.requests == []


async def test_a_streamed_run_consumes_the_reported_usage(budget: BudgetClient) -> None:
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    guard = BudgetGuard(budget, run_id, default_max_tokens=500)
    with FakeOpenAIServer(FakeOpenAI(output_tokens=7)) as fake:
        async with agent_of(fake, guard).run_stream("say something") as result:
            text = await result.get_output()
    assert text.split() == ["word"] * 7
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert fake.reported_tokens > 7


async def test_cancelling_a_stream_mid_way_releases_its_hold(budget: BudgetClient) -> None:
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    guard = BudgetGuard(budget, run_id, default_max_tokens=500)
    with FakeOpenAIServer(FakeOpenAI(output_tokens=50, hold_stream=True)) as fake:
        agent = agent_of(fake, guard)
        texts: list[str] = []

        async def stream() -> None:
            async with agent.run_stream("say something") as result:
                async for text in result.stream_text(delta=True):
                    texts.append(text)

        held = await held_then_cancelled(budget, run_id, fake, stream())
    assert held > 0
    assert fake.requests[0]["stream"] is True
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.held, tokens.consumed) == (0, 0)


async def test_turns_stop_at_exactly_the_token_limit_under_up_to(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    """Prompts counted as the provider bills them and the last grant capped to what is left:
    the run ends with every token of its limit consumed, none held, none over."""
    run_id = f"pai-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=1_000))
    guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=200)
    fake_llm.reply_tokens = 1_000  # every reply as long as its max tokens allow
    provider = OpenAIProvider(base_url=fake_llm.openai_url, api_key="test-key")
    agent = Agent(BudgetedModel(OpenAIChatModel(MODEL, provider=provider), guard))
    turns = 0
    refusal: BudgetRefused | None = None
    while refusal is None and turns < 100:
        try:
            await agent.run(f"turn {turns}")
        except BudgetRefused as refused:
            refusal = refused
        turns += 1
    assert refusal is not None
    assert refusal.kind is Refusal.EXHAUSTED
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.consumed, tokens.held) == (1_000, 0)
    assert tokens.consumed == fake_llm.billed_tokens
