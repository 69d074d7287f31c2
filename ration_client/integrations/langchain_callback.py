"""A LangChain callback handler holding a ration budget around each chat-model and tool call.

    handler = BudgetCallbackHandler(BudgetGuard(BudgetClient(), "run-1"))
    model = ChatOpenAI(model="gpt-4o-mini", max_tokens=500, callbacks=[handler])

Works for any chat model and for LangGraph graphs (`config={"callbacks": [handler]}`). On chat
model start the call's worst case (its prompt counted with tiktoken plus the model's
`max_tokens`, and their catalog cost) is held, ALL_OR_NOTHING because a callback cannot lower
the request's max_tokens, so give the model a `max_tokens` (without one, the guard's
`default_max_tokens` is held and a longer answer is recorded as an overrun). The end
consumes the usage the model reported (`usage_metadata`; for OpenAI streams `stream_usage=True`);
an error or a cancellation (LangChain reports both) releases the hold. A tool start counts one
tool call. Refusals raise `BudgetRefused` (a `LangChainException`) before the request is sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.exceptions import LangChainException
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from ration_client.errors import RationError
from ration_client.integrations.core import BudgetGuard, BudgetRefusal, GuardedCall, Refusal
from ration_client.integrations.shared import count_tool_call, framework_error
from ration_client.integrations.tokens import count_openai_messages
from ration_client.prices import ModelUsage
from ration_client.views import ReserveMode

__all__ = ["BudgetCallbackHandler", "BudgetRefused"]

T = TypeVar("T")


class BudgetRefused(BudgetRefusal, LangChainException):
    """The ration budget refused a model or tool call: `.kind` says how, `.refusal` is the
    service's error with its details."""

    def __init__(self, refusal: RationError, kind: Refusal) -> None:
        super().__init__(str(refusal))
        self._set_refusal(refusal, kind)


_ROLES = {"human": "user", "ai": "assistant"}  # LangChain's message types as chat roles


def _as_dict(message: BaseMessage) -> dict[str, Any]:
    """What the provider receives of a message, for counting its tokens."""
    role = _ROLES.get(message.type, message.type)
    fields: dict[str, Any] = {"role": role, "content": message.content}
    if getattr(message, "tool_calls", None):
        fields["tool_calls"] = message.tool_calls  # type: ignore[attr-defined]
    return fields


def _model_name(params: dict[str, Any], metadata: dict[str, Any] | None) -> str:
    for source in (params, metadata or {}):
        for key in ("model", "model_name", "ls_model_name"):
            if source.get(key):
                return str(source[key])
    raise ValueError("the chat model does not say its model name (invocation params)")


def _usage(response: LLMResult) -> ModelUsage | None:
    for generations in response.generations:
        for generation in generations:
            message = getattr(generation, "message", None)
            usage = getattr(message, "usage_metadata", None)
            if usage:
                return ModelUsage(usage["input_tokens"], usage["output_tokens"])
    reported = (response.llm_output or {}).get("token_usage") or {}
    if reported:
        return ModelUsage(reported["prompt_tokens"], reported["completion_tokens"])
    return None


class BudgetCallbackHandler(AsyncCallbackHandler):
    """One run's ration budget around every chat-model and tool call it sees."""

    raise_error = True  # a refusal must stop the call, not be logged

    def __init__(self, guard: BudgetGuard) -> None:
        if guard.mode is not ReserveMode.ALL_OR_NOTHING:
            raise ValueError("a callback cannot lower max_tokens: use an ALL_OR_NOTHING guard")
        self.guard = guard
        self._open: dict[UUID, GuardedCall] = {}
        self._home: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):  # made outside a loop: the first model call's
            self._home = asyncio.get_running_loop()

    async def _at_home(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs `work` on the loop the budget client's channel lives on. LangChain runs the
        async callbacks of a sync tool (run in a worker thread) on a loop of their own."""
        here = asyncio.get_running_loop()
        if self._home is None:
            self._home = here
        if here is self._home or not self._home.is_running():
            return await work
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._home))

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        params = kwargs.get("invocation_params") or {}
        model = _model_name(params, metadata)
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
        batch = [_as_dict(m) for prompt in messages for m in prompt]
        prompt = count_openai_messages(batch, model, tools=params.get("tools"))
        call = self.guard.call(model, prompt_tokens=prompt, max_tokens=max_tokens)
        try:
            await self._at_home(call.start())
        except RationError as error:
            refused = framework_error(error, BudgetRefused)
            if refused is None:
                raise
            raise refused from error
        self._open[run_id] = call

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is not None:
            # Nothing reported: the call may have used all it was allowed.
            await self._at_home(call.consume(_usage(response) or call.worst_case))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is not None:
            await self._at_home(call.end(error))

    def on_tool_start(  # type: ignore[override]
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Sync on purpose: LangChain runs a sync callback in a worker thread on both paths and
        honours its error, while an async one driven by a sync tool's callback manager has its
        error logged and dropped (and the tool would run). It waits for the budget call on the
        loop of the budget client."""
        home = self._home
        if home is None or not home.is_running():
            raise RuntimeError("BudgetCallbackHandler: create it inside the run's event loop")
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is home:  # waiting here would block the loop the call needs
            raise RuntimeError("BudgetCallbackHandler.on_tool_start cannot run inline")
        try:
            asyncio.run_coroutine_threadsafe(count_tool_call(self.guard), home).result()
        except RationError as error:
            refused = framework_error(error, BudgetRefused)
            if refused is None:
                raise
            raise refused from error
