"""A LangChain callback handler holding a ration budget around each chat-model and tool call.

    budget = RunBudget(BudgetClient(), "run-1", prices=Prices(...))
    handler = BudgetCallbackHandler(budget)
    model = ChatOpenAI(model="gpt-4o-mini", max_tokens=500, callbacks=[handler])

Works for any chat model and for LangGraph graphs (`config={"callbacks": [handler]}`). On chat
model start the call's worst case (its prompt's bound plus the model's `max_tokens`) is held,
ALL_OR_NOTHING because a callback cannot lower the request's max_tokens, so give the model a
`max_tokens` (without one, `default_max_tokens` is held and a longer answer overruns). The end
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
from ration_client.integrations.guard import ModelCall, RunBudget, Usage
from ration_client.views import ReserveMode

__all__ = ["BudgetCallbackHandler", "BudgetRefused"]

T = TypeVar("T")


class BudgetRefused(LangChainException):
    """The ration budget refused a model or tool call; `.refusal` is the service's error."""

    def __init__(self, refusal: RationError) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


def _model_name(params: dict[str, Any], metadata: dict[str, Any] | None) -> str:
    for source in (params, metadata or {}):
        for key in ("model", "model_name", "ls_model_name"):
            if source.get(key):
                return str(source[key])
    raise ValueError("the chat model does not say its model name (invocation params)")


def _usage(response: LLMResult) -> Usage | None:
    for generations in response.generations:
        for generation in generations:
            message = getattr(generation, "message", None)
            usage = getattr(message, "usage_metadata", None)
            if usage:
                return Usage(usage["input_tokens"], usage["output_tokens"])
    reported = (response.llm_output or {}).get("token_usage") or {}
    if reported:
        return Usage(reported["prompt_tokens"], reported["completion_tokens"])
    return None


class BudgetCallbackHandler(AsyncCallbackHandler):
    """One run's ration budget around every chat-model and tool call it sees."""

    raise_error = True  # a refusal must stop the call, not be logged

    def __init__(self, budget: RunBudget) -> None:
        self.budget = budget
        self._open: dict[UUID, ModelCall] = {}
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
        batch = [m for prompt in messages for m in prompt]
        texts = [m.content for m in batch] + [getattr(m, "tool_calls", None) for m in batch]
        prompt = self.budget.prompt_tokens(*texts, params.get("tools"), messages=len(batch))
        try:
            call = await self._at_home(
                self.budget.start_model_call(
                    model, prompt, max_tokens, mode=ReserveMode.ALL_OR_NOTHING
                )
            )
        except RationError as refusal:
            raise BudgetRefused(refusal) from refusal
        self._open[run_id] = call

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is not None:
            await self._at_home(call.settle(_usage(response) or call.worst_case))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._open.pop(run_id, None)
        if call is not None:
            await self._at_home(call.release())

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
            asyncio.run_coroutine_threadsafe(self.budget.tool_call(), home).result()
        except RationError as refusal:
            raise BudgetRefused(refusal) from refusal
