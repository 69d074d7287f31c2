"""Budgets inside the frameworks orchestrators use; each framework module is an optional extra.

- `core`: the framework-neutral guard (worst-case hold, max_tokens capped to the grant, Consume
  of the reported usage and cost, Release on error or cancel) and the refusal kinds.
- `tokens`: prompt tokens counted locally with tiktoken.
- `openai`, `anthropic`, `litellm`: the SDK integrations (`ration[openai]`, `ration[anthropic]`,
  `ration[litellm]`); importing this package imports none of them.
- `agents` (`ration[agents]`): OpenAI Agents SDK model wrapper, tool-call hooks, memory `Session`.
- `langgraph` (`ration[langgraph]`): LangChain callback handler and a LangGraph `BaseStore` on
  ration memory. `pydantic_ai` (`ration[pydantic-ai]`): a budgeted `WrapperModel`.
"""

from ration_client.integrations.core import BudgetGuard, GuardedCall, Refusal, refusal_of
from ration_client.prices import ModelUsage, PriceCatalog, UnknownModel

__all__ = [
    "BudgetGuard",
    "GuardedCall",
    "ModelUsage",
    "PriceCatalog",
    "Refusal",
    "UnknownModel",
    "refusal_of",
]
