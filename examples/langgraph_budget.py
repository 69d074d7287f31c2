"""A LangGraph agent loop under a ration budget, with long-term memory in a ration BaseStore.

Needs a budget and a memory service (RATION_BUDGET_ADDRESS, RATION_MEMORY_ADDRESS, `make run`)
and an OpenAI-compatible endpoint (OPENAI_API_KEY, optionally OPENAI_BASE_URL)."""

import asyncio
import os
import uuid
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import BaseStore

from ration_client import BudgetClient, Dimension, Policy
from ration_client.integrations.langgraph import (
    BudgetCallbackHandler,
    BudgetGuard,
    BudgetRefused,
    RationStore,
)

MODEL = os.environ.get("RATION_EXAMPLE_MODEL", "gpt-4o-mini")


@tool
def lookup(step: int) -> str:
    """Looks a step up."""
    return f"step {step} looked up"


def build(store: BaseStore) -> Any:
    model = ChatOpenAI(model=MODEL, max_completion_tokens=300, stream_usage=True).bind_tools(
        [lookup]
    )

    async def agent(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        notes = await store.asearch(("notes",), query="lookups", limit=3)
        context = [f"note: {n.value['text']}" for n in notes]
        reply = await model.ainvoke([*context, *state["messages"]])
        await store.aput(("notes",), "last", {"text": f"asked for {len(reply.tool_calls)} lookups"})
        return {"messages": [reply]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(store=store)


async def main() -> None:
    run_id = f"langgraph-{uuid.uuid4().hex[:8]}"  # a new run each time: the file reruns cleanly
    store = RationStore(prefix=f"examples/{run_id}", token_budget=2_000)
    async with BudgetClient() as budget:
        await budget.open_run(run_id, project_id="examples", policy=Policy(max_tool_calls=3))
        handler = BudgetCallbackHandler(BudgetGuard(budget, run_id))
        config: Any = {"callbacks": [handler], "recursion_limit": 50}
        try:
            await build(store).ainvoke({"messages": [HumanMessage("Look everything up.")]}, config)
        except BudgetRefused as refused:
            print("stopped by the budget:", refused.refusal.reason, refused.refusal.metadata)
        run = await budget.get_run(run_id)
        for dimension in (Dimension.TOKENS, Dimension.TOOL_CALLS, Dimension.COST):
            status = run.status(dimension)
            print(f"{dimension}: consumed {status.consumed}, held {status.held}")
    note = await store.aget(("notes",), "last")
    print("stored note:", None if note is None else note.value["text"])
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
