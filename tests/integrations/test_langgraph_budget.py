"""LangGraph/LangChain: a real graph agent loop (ChatOpenAI against a fake OpenAI server, a
ToolNode), budgeted by a real ration budget service through the callback handler."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from ration_client import (
    BudgetClient,
    BudgetExhausted,
    Dimension,
    ModelDenied,
    Policy,
)
from ration_client.integrations.langgraph import BudgetCallbackHandler, BudgetGuard, BudgetRefused
from tests.support.fake_openai import (
    FakeOpenAI,
    FakeOpenAIServer,
    assert_ledger_is_the_report,
    held_then_cancelled,
)

MODEL = "gpt-4o-mini"
LOOKED_UP: list[int] = []


@tool
def lookup(step: int) -> str:
    """Looks a step up."""
    LOOKED_UP.append(step)
    return f"step {step} looked up"


def chat(fake: FakeOpenAI, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=fake.url,
        api_key="test-key",  # type: ignore[arg-type]
        max_retries=0,
        max_tokens=100,  # type: ignore[call-arg]
        stream_usage=True,
        **options,
    )


def react_graph(model: Any) -> Any:
    """The classic loop: the model answers or calls tools, the tools' results go back to it."""
    bound = model.bind_tools([lookup])

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


async def test_a_graph_loop_stops_at_exactly_its_tool_call_limit(budget: BudgetClient) -> None:
    run_id = f"lg-{uuid.uuid4().hex[:8]}"
    policy = Policy(max_tokens=100_000, max_tool_calls=5)
    await budget.open_run(run_id, project_id="p", policy=policy)
    handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
    LOOKED_UP.clear()
    config: Any = {"callbacks": [handler], "recursion_limit": 100}
    with FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake:
        graph = react_graph(chat(fake))
        with pytest.raises(BudgetRefused) as refused:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert isinstance(refused.value.refusal, BudgetExhausted)
    assert refused.value.refusal.dimension is Dimension.TOOL_CALLS
    tools = (await budget.get_run(run_id)).status(Dimension.TOOL_CALLS)
    assert (tools.consumed, tools.limit, tools.held) == (5, 5, 0)
    assert LOOKED_UP == [0, 1, 2, 3, 4]  # the sixth tool call never ran
    assert len(fake.requests) == 6
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)


async def test_a_token_budget_stops_the_loop_before_a_call_that_could_overrun_it(
    budget: BudgetClient,
) -> None:
    run_id = f"lg-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=3_000))
    handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
    config: Any = {"callbacks": [handler], "recursion_limit": 1_000}
    with FakeOpenAIServer(FakeOpenAI(tool_call="lookup")) as fake:
        graph = react_graph(chat(fake))
        with pytest.raises(BudgetRefused) as refused:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert isinstance(refused.value.refusal, BudgetExhausted)
    assert refused.value.refusal.dimension is Dimension.TOKENS
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert len(fake.requests) >= 2
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert tokens.consumed <= 3_000


async def test_a_denied_model_is_refused_before_any_request_reaches_the_provider(
    budget: BudgetClient,
) -> None:
    run_id = f"lg-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(model_allow=("claude-*",)))
    handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
    with FakeOpenAIServer(FakeOpenAI()) as fake:
        model = chat(fake, callbacks=[handler])
        with pytest.raises(BudgetRefused) as refused:
            await model.ainvoke("hello")
    assert isinstance(refused.value.refusal, ModelDenied)
    assert refused.value.refusal.model == MODEL
    assert fake.requests == []


async def test_cancelling_a_stream_mid_way_releases_its_hold(budget: BudgetClient) -> None:
    run_id = f"lg-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
    with FakeOpenAIServer(FakeOpenAI(output_tokens=50, hold_stream=True)) as fake:
        model = chat(fake, callbacks=[handler])
        chunks: list[Any] = []

        async def stream() -> None:
            async for chunk in model.astream("say something"):
                chunks.append(chunk)

        held = await held_then_cancelled(budget, run_id, fake, stream())
    assert held > 0
    assert fake.requests[0]["stream"] is True
    tokens = (await budget.get_run(run_id)).status(Dimension.TOKENS)
    assert (tokens.held, tokens.consumed) == (0, 0)


async def test_a_stream_consumes_the_reported_usage(budget: BudgetClient) -> None:
    run_id = f"lg-{uuid.uuid4().hex[:8]}"
    await budget.open_run(run_id, project_id="p", policy=Policy(max_tokens=10_000))
    handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
    with FakeOpenAIServer(FakeOpenAI(output_tokens=7)) as fake:
        model = chat(fake, callbacks=[handler])
        text = "".join([str(chunk.content) async for chunk in model.astream("say something")])
    assert text.split() == ["word"] * 7
    await assert_ledger_is_the_report(budget, run_id, fake, MODEL)
    assert fake.reported_tokens > 7
