"""OpenAI Agents SDK: a budgeted `Model` wrapper, tool-call hooks and a memory `Session`.

    guard = BudgetGuard(BudgetClient(), "run-1", mode=ReserveMode.UP_TO)
    model = BudgetedModel(OpenAIChatCompletionsModel("gpt-4o", client), guard)
    session = RationSession("chat-1", MemoryClient())
    await Runner.run(Agent(name="a", model=model), "hi", hooks=BudgetHooks(guard), session=session)

Each model call (plain or streamed) holds its worst case before any request is sent, is given
the `max_tokens` that fits, and consumes the provider's reported usage; errors and cancellation
release the hold. Prompt tokens are counted with tiktoken (`integrations.tokens`), cost from the
guard's price catalog. Each tool call is counted before the tool runs. Refusals are raised as
`BudgetRefused`, an `AgentsException` carrying the service's refusal as `.refusal`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import AgentsException, Model, ModelProvider, ModelSettings, RunHooks
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent

from ration_client.errors import RationError
from ration_client.integrations.agents_session import RationSession
from ration_client.integrations.core import BudgetGuard, BudgetRefusal, GuardedCall, Refusal
from ration_client.integrations.shared import count_tool_call, refusals_as
from ration_client.integrations.tokens import count_openai_input
from ration_client.prices import ModelUsage

__all__ = [
    "BudgetGuard",
    "BudgetHooks",
    "BudgetRefused",
    "BudgetedModel",
    "BudgetedModelProvider",
    "RationSession",
]


class BudgetRefused(BudgetRefusal, AgentsException):
    """The ration budget refused a model or tool call: `.kind` says how (model denied,
    exhausted, retry later) and `.refusal` is the service's error with its details."""

    def __init__(self, refusal: RationError, kind: Refusal) -> None:
        super().__init__(str(refusal))
        self._set_refusal(refusal, kind)


def _tool_schemas(tools: list[Any], handoffs: list[Any], output_schema: Any) -> list[Any]:
    """What the tools, handoffs and output schema put into the prompt, as JSON-able values."""
    described: list[Any] = []
    for tool in tools:
        schema = getattr(tool, "params_json_schema", None)
        described.append([getattr(tool, "name", ""), getattr(tool, "description", ""), schema])
    for handoff in handoffs:
        described.append([handoff.tool_name, handoff.tool_description, handoff.input_json_schema])
    if output_schema is not None and not output_schema.is_plain_text():
        described.append(output_schema.json_schema())
    return described


class BudgetedModel(Model):
    """Wraps any Agents SDK `Model`: every call inside one ration hold of its worst case."""

    def __init__(self, inner: Model, guard: BudgetGuard, *, model_name: str | None = None) -> None:
        self.inner = inner
        self.guard = guard
        self.model_name = model_name or str(getattr(inner, "model", ""))
        if not self.model_name:
            raise ValueError("pass model_name=: the wrapped model does not say its name")

    @contextlib.asynccontextmanager
    async def _held(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        extras: list[Any],
    ) -> AsyncIterator[tuple[GuardedCall, ModelSettings]]:
        prompt = count_openai_input(
            input, self.model_name, instructions=system_instructions, tools=extras or None
        )
        call = self.guard.call(
            self.model_name, prompt_tokens=prompt, max_tokens=model_settings.max_tokens
        )
        async with refusals_as(BudgetRefused), call:
            yield call, dataclasses.replace(model_settings, max_tokens=call.max_tokens)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        extras = _tool_schemas(tools, handoffs, output_schema)
        async with self._held(system_instructions, input, model_settings, extras) as (call, ms):
            response = await self.inner.get_response(
                system_instructions, input, ms, tools, output_schema, handoffs, tracing, **kwargs
            )
            usage = response.usage
            await call.consume(ModelUsage(usage.input_tokens, usage.output_tokens))
            return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Streams the wrapped model's events; usage is read from `response.completed` (the
        request asks for it). A stream that ends without usage consumes the whole grant."""
        extras = _tool_schemas(tools, handoffs, output_schema)
        settings = dataclasses.replace(model_settings, include_usage=True)
        async with self._held(system_instructions, input, settings, extras) as (call, ms):
            reported: ModelUsage | None = None
            stream = self.inner.stream_response(
                system_instructions, input, ms, tools, output_schema, handoffs, tracing, **kwargs
            )
            async for event in stream:
                if event.type == "response.completed" and event.response.usage is not None:
                    u = event.response.usage
                    reported = ModelUsage(u.input_tokens, u.output_tokens)
                yield event
            # No usage reported: the call may have used its whole worst case.
            await call.consume(reported or call.worst_case)

    async def close(self) -> None:
        await self.inner.close()

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)


class BudgetedModelProvider(ModelProvider):
    """Wraps a `ModelProvider` (e.g. in `RunConfig(model_provider=...)`): every model it
    returns is a `BudgetedModel` of one run's budget."""

    def __init__(self, inner: ModelProvider, guard: BudgetGuard) -> None:
        self.inner = inner
        self.guard = guard

    def get_model(self, model_name: str | None) -> Model:
        model = self.inner.get_model(model_name)
        return BudgetedModel(model, self.guard, model_name=model_name or None)


class BudgetHooks(RunHooks[Any]):
    """Run hooks counting each local tool call (one `toolCalls` unit) before the tool runs;
    a run with none left is stopped by `BudgetRefused`."""

    def __init__(self, guard: BudgetGuard) -> None:
        self.guard = guard

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        async with refusals_as(BudgetRefused):
            await count_tool_call(self.guard)
