"""pydantic-ai: a budgeted `WrapperModel` (`pip install 'ration[pydantic-ai]'`).

    guard = BudgetGuard(BudgetClient(), "run-1", mode=ReserveMode.UP_TO)
    agent = Agent(BudgetedModel(OpenAIChatModel("gpt-4o-mini"), guard), tools=[...])

Each model request (plain or streamed) holds its worst case (the messages and tool schemas
counted with tiktoken, plus `max_tokens`, and their catalog cost) before anything is sent, is
sent with `max_tokens` capped to the grant, and consumes the usage the provider reported; an
error or a cancellation releases the hold. The tool calls a response asks for are counted (one
`toolCalls` unit each) before the response is handed back, so a run without tool calls left
stops before the tools run. Refusals are raised as `BudgetRefused`, pydantic-ai's own
`UsageLimitExceeded`, with the service's error as `.refusal`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ration_client.errors import RationError
from ration_client.integrations.core import BudgetGuard, BudgetRefusal, GuardedCall, Refusal
from ration_client.integrations.shared import count_tool_call, refusals_as
from ration_client.integrations.tokens import count_openai_messages
from ration_client.prices import ModelUsage

__all__ = ["BudgetGuard", "BudgetRefused", "BudgetedModel"]


class BudgetRefused(BudgetRefusal, UsageLimitExceeded):
    """The ration budget refused a model request or a tool call: `.kind` says how, `.refusal`
    is the service's error with its details."""

    def __init__(self, refusal: RationError, kind: Refusal) -> None:
        super().__init__(str(refusal))
        self._set_refusal(refusal, kind)


# The chat role each message part is sent as (what the provider frames and bills).
_ROLES = {
    "system-prompt": "system",
    "user-prompt": "user",
    "retry-prompt": "user",
    "tool-return": "tool",
    "text": "assistant",
    "tool-call": "assistant",
}


def _chat_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The messages as the provider receives them (instructions first, then each part's
    content, tool name and arguments), for counting their tokens."""
    chat: list[dict[str, Any]] = []
    for message in messages:
        instructions = getattr(message, "instructions", None)
        if instructions:
            chat.insert(0, {"role": "system", "content": instructions})
        for part in message.parts:
            fields: dict[str, Any] = {"role": _ROLES.get(part.part_kind, part.part_kind)}
            for name in ("content", "tool_name", "args"):
                value = getattr(part, name, None)
                if value is not None:
                    fields[name] = value if isinstance(value, str) else str(value)
            chat.append(fields)
    return chat


def _tools(parameters: ModelRequestParameters) -> list[Any]:
    return [
        [tool.name, tool.description, tool.parameters_json_schema]
        for tool in (*parameters.function_tools, *parameters.output_tools)
    ]


class BudgetedModel(WrapperModel):
    """Wraps any pydantic-ai model: every request inside one ration hold of its worst case."""

    def __init__(self, wrapped: Model | str, guard: BudgetGuard) -> None:
        super().__init__(wrapped)
        self.guard = guard

    def _guarded(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
    ) -> GuardedCall:
        model = self.model_name
        tools = _tools(parameters) or None
        prompt = count_openai_messages(_chat_messages(messages), model, tools=tools)
        max_tokens = (model_settings or {}).get("max_tokens")
        return self.guard.call(model, prompt_tokens=prompt, max_tokens=max_tokens)

    async def _count_tool_calls(self, response: ModelResponse) -> None:
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                await count_tool_call(self.guard)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        call = self._guarded(messages, model_settings, model_request_parameters)
        async with refusals_as(BudgetRefused), call:
            settings: ModelSettings = {**(model_settings or {}), "max_tokens": call.max_tokens}
            response = await self.wrapped.request(messages, settings, model_request_parameters)
            usage = response.usage
            await call.consume(ModelUsage(usage.input_tokens, usage.output_tokens))
            await self._count_tool_calls(response)
            return response

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncIterator[StreamedResponse]:
        call = self._guarded(messages, model_settings, model_request_parameters)
        async with refusals_as(BudgetRefused), call:
            settings: ModelSettings = {**(model_settings or {}), "max_tokens": call.max_tokens}
            async with self.wrapped.request_stream(
                messages, settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            usage = stream.usage
            await call.consume(ModelUsage(usage.input_tokens, usage.output_tokens))
            await self._count_tool_calls(stream.get())
