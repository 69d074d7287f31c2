"""OpenAI Agents SDK: a real agent loop against a fake OpenAI server, budgeted by a real ration
budget service: stopped by the budget, denied before any request, released on cancellation."""

from __future__ import annotations

import uuid

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import ModelTracing
from openai import AsyncOpenAI

from ration_client import (
    BudgetClient,
    BudgetExhausted,
    Dimension,
    ModelDenied,
    Policy,
    ReserveMode,
)
from ration_client.integrations import Refusal
from ration_client.integrations.agents import BudgetedModel, BudgetGuard, BudgetHooks, BudgetRefused
from tests.support.fake_llm import FakeLLM
from tests.support.fake_openai import (
    FakeOpenAI,
    FakeOpenAIServer,
    assert_ledger_is_the_report,
    held_then_cancelled,
)

MODEL = "gpt-4o-mini"
set_tracing_disabled(True)  # the SDK would export traces to OpenAI


LOOKED_UP: list[int] = []


@function_tool
def lookup(step: int) -> str:
    """Looks a step up."""
    LOOKED_UP.append(step)
    return f"step {step} looked up"


def agent_of(fake: FakeOpenAI, run_budget: BudgetGuard, **settings: int) -> Agent[None]:
    client = AsyncOpenAI(base_url=fake.url, api_key="test-key", max_retries=0)
    model = BudgetedModel(OpenAIChatCompletionsModel(MODEL, client), run_budget)
    return Agent(
        name="looper",
        instructions="Look every step up.",
        model=model,
        tools=[lookup],
        model_settings=ModelSettings(**settings),  # type: ignore[arg-type]
    )


async def test_an_agent_loop_is_stopped_by_the_budget_with_the_ledger_equal_to_usage(
    budget: BudgetClient,
) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=4_000))
    run_budget = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=100)
    with FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake:
        agent = agent_of(fake, run_budget)
        with pytest.raises(BudgetRefused) as refused:
            await Runner.run(agent, "start", hooks=BudgetHooks(run_budget), max_turns=1_000)
    # Refused by the service, or (UP_TO) by the guard when the grant left no room for output.
    assert isinstance(refused.value.refusal, BudgetExhausted)
    assert refused.value.kind is Refusal.EXHAUSTED
    run = await budget.get_run(run_id)
    tokens, tools = run.status(Dimension.TOKENS), run.status(Dimension.TOOL_CALLS)
    assert len(fake.requests) >= 2  # a loop: model, tool, model, ...
    assert tokens.consumed == fake.reported_tokens  # Σ consumed = provider-reported usage
    assert tokens.consumed <= 4_000
    assert (tokens.held, tools.held) == (0, 0)  # no hold left open
    assert tools.consumed == len(fake.requests)  # each reply's tool call was counted
    # Every request was capped to what its grant left after the prompt's bound.
    assert all(0 < r["max_tokens"] <= 100 for r in fake.requests)


async def test_an_agent_loop_stops_at_exactly_its_tool_call_limit(budget: BudgetClient) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    policy = Policy(max_tokens=100_000, max_tool_calls=5)
    await budget.open_run(run_id, project_id="p", policy=policy)
    run_budget = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=100)
    LOOKED_UP.clear()
    hooks = BudgetHooks(run_budget)
    with (
        FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake,
        pytest.raises(BudgetRefused) as refused,
    ):
        await Runner.run(agent_of(fake, run_budget), "go", hooks=hooks)
    assert isinstance(refused.value.refusal, BudgetExhausted)
    assert refused.value.refusal.dimension is Dimension.TOOL_CALLS
    tools = (await budget.get_run(run_id)).status(Dimension.TOOL_CALLS)
    assert (tools.consumed, tools.limit, tools.held) == (5, 5, 0)
    assert LOOKED_UP == [0, 1, 2, 3, 4]  # the sixth tool call never ran
    assert len(fake.requests) == 6
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)


async def test_a_denied_model_is_refused_before_any_request_reaches_the_provider(
    budget: BudgetClient,
) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(model_allow=("claude-*",)))
    run_budget = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO)
    with FakeOpenAIServer(FakeOpenAI()) as fake, pytest.raises(BudgetRefused) as refused:
        await Runner.run(agent_of(fake, run_budget), "hello")
    assert isinstance(refused.value.refusal, ModelDenied)
    assert refused.value.refusal.model == MODEL
    assert fake.requests == []


async def test_cancelling_a_streamed_call_mid_stream_releases_its_hold(
    budget: BudgetClient,
) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    run_budget = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO)
    with FakeOpenAIServer(FakeOpenAI(output_tokens=50, hold_stream=True)) as fake:
        model = agent_of(fake, run_budget, max_tokens=500).model
        assert isinstance(model, BudgetedModel)
        events: list[str] = []

        async def stream() -> None:
            async for event in model.stream_response(
                "Say something.",
                "hello",
                ModelSettings(max_tokens=500),
                [],
                None,
                [],
                ModelTracing.DISABLED,
                previous_response_id=None,
                conversation_id=None,
                prompt=None,
            ):
                events.append(event.type)

        held = await held_then_cancelled(budget, run_id, fake, stream())
    assert held > 0  # the call was in flight under its hold
    assert fake.requests[0]["stream"] is True
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.held, tokens.consumed) == (0, 0)


async def test_a_streamed_run_consumes_the_reported_usage(budget: BudgetClient) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    run_budget = BudgetGuard(budget, run_id, default_max_tokens=500)
    with FakeOpenAIServer(FakeOpenAI(output_tokens=7)) as fake:
        result = Runner.run_streamed(agent_of(fake, run_budget), "say something")
        async for _ in result.stream_events():
            pass
    assert str(result.final_output).split() == ["word"] * 7
    assert fake.requests[0]["stream_options"] == {"include_usage": True}
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert fake.reported_tokens > 7


async def test_the_responses_api_model_is_budgeted_too(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    guard = BudgetGuard(budget, run_id, default_max_tokens=200)
    client = AsyncOpenAI(base_url=fake_llm.openai_url, api_key="test-key", max_retries=0)
    model = BudgetedModel(OpenAIResponsesModel(MODEL, client), guard)
    result = await Runner.run(Agent(name="plain", model=model), "hello")
    assert result.final_output
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.consumed, tokens.held) == (fake_llm.billed_tokens, 0)
    assert fake_llm.requests == 1


async def test_turns_stop_at_exactly_the_token_limit_under_up_to(
    budget: BudgetClient, fake_llm: FakeLLM
) -> None:
    """Prompts counted as the provider bills them and the last grant capped to what is left:
    the run ends with every token of its limit consumed, none held, none over."""
    run_id = f"agents-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=1_000))
    guard = BudgetGuard(budget, run_id, mode=ReserveMode.UP_TO, default_max_tokens=200)
    fake_llm.reply_tokens = 1_000  # every reply as long as its max tokens allow
    client = AsyncOpenAI(base_url=fake_llm.openai_url, api_key="test-key", max_retries=0)
    agent = Agent(name="turns", model=BudgetedModel(OpenAIResponsesModel(MODEL, client), guard))
    turns = 0
    refusal: BudgetRefused | None = None
    while refusal is None and turns < 100:
        try:
            await Runner.run(agent, f"turn {turns}")
        except BudgetRefused as refused:
            refusal = refused
        turns += 1
    assert refusal is not None
    assert refusal.kind is Refusal.EXHAUSTED
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.consumed, tokens.held) == (1_000, 0)
    assert tokens.consumed == fake_llm.billed_tokens
