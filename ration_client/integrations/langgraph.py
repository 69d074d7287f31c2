"""LangGraph and LangChain (`pip install 'ration[langgraph]'`): budgets and long-term memory.

`BudgetCallbackHandler` holds a ration budget around each chat-model and tool call of a graph
(`config={"callbacks": [handler]}`); `RationStore` is a `BaseStore` on ration memory
(`graph.compile(store=RationStore(...))`)."""

from ration_client.integrations.core import BudgetGuard
from ration_client.integrations.langchain_callback import BudgetCallbackHandler, BudgetRefused
from ration_client.integrations.langgraph_store import RationStore

__all__ = ["BudgetCallbackHandler", "BudgetGuard", "BudgetRefused", "RationStore"]
