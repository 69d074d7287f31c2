"""Framework integrations: each module imports its framework, so import only the one you use.

`agents` (OpenAI Agents SDK: a budgeted `Model` wrapper, tool-call hooks, a memory `Session`),
`langgraph` (a LangChain callback handler and a LangGraph `BaseStore` on ration memory) and
`pydantic_ai` (a budgeted `WrapperModel`). `guard` is what they share: one worst-case hold per
model call, with no framework import."""
