"""Anthropic SDK: `budgeted(AsyncAnthropic(...), guard)` guards messages.create and .stream.

    client = budgeted(AsyncAnthropic(), BudgetGuard(budget, run_id))
    reply = await client.messages.create(model=..., max_tokens=1024, messages=...)
    async with client.messages.stream(model=..., max_tokens=1024, messages=...) as stream: ...

Each call reserves its worst case (the prompt estimated locally, see `tokens`: Anthropic
publishes no tokenizer, so the count is o200k_base scaled up; plus max_tokens, at catalog
prices), sends max_tokens capped to the grant, consumes the reported usage (cache reads and
writes included) and its cost, and releases the hold on an error, a timeout or a cancellation.
`stream=True` streams are consumed at the final `message_delta` event; `messages.stream(...)` at
the end of its block once the message stopped, released otherwise. Refusals are anthropic's own
errors: `ModelDeniedError` (PermissionDeniedError) and `BudgetExhaustedError` / `BudgetHeldError`
(RateLimitError), with `.refusal`, the ration error."""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any

import anthropic

from ration_client.errors import RationError
from ration_client.integrations._status_errors import status_error
from ration_client.integrations.core import (
    BudgetGuard,
    BudgetRefusal,
    GuardedCall,
    GuardedStream,
    ModelUsage,
    Refusal,
)
from ration_client.integrations.tokens import count_anthropic_prompt

__all__ = [
    "BudgetExhaustedError",
    "BudgetHeldError",
    "BudgetedAnthropic",
    "ModelDeniedError",
    "budgeted",
]


class ModelDeniedError(BudgetRefusal, anthropic.PermissionDeniedError):
    """The run's policy denies this model; nothing was sent to the provider."""


class BudgetExhaustedError(BudgetRefusal, anthropic.RateLimitError):
    """The run has no budget left for this call (or has failed, closed or is interrupted)."""


class BudgetHeldError(BudgetRefusal, anthropic.RateLimitError):
    """Open holds of the run take the room for now; retry after `refusal.retry_after_seconds`."""


_ERRORS: dict[Refusal, type[anthropic.APIStatusError]] = {
    Refusal.MODEL_DENIED: ModelDeniedError,
    Refusal.EXHAUSTED: BudgetExhaustedError,
    Refusal.RETRY_LATER: BudgetHeldError,
}


def as_anthropic_error(error: RationError, url: str) -> BaseException:
    """The anthropic error for a budget refusal (the error itself when it is not one)."""
    return status_error(_ERRORS, error, url, inner_body=False)


def usage_of(usage: Any) -> ModelUsage:
    """Anthropic reports uncached input apart from cache writes and reads: all are input."""
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return ModelUsage(
        (usage.input_tokens or 0) + read + written,
        usage.output_tokens or 0,
        cache_read_tokens=read,
        cache_write_tokens=written,
    )


class _EventUsage:
    """Usage from a raw event stream: input at message_start, the total at message_delta."""

    def __init__(self) -> None:
        self._start: Any = None

    def __call__(self, event: Any) -> ModelUsage | None:
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self._start = event.message.usage
        elif kind == "message_delta" and self._start is not None:
            final = event.usage
            start = usage_of(self._start)
            input_tokens = getattr(final, "input_tokens", None)
            if input_tokens is not None:  # newer API versions repeat the input on the delta
                return usage_of(final)
            return ModelUsage(
                start.input_tokens,
                final.output_tokens,
                cache_read_tokens=start.cache_read_tokens,
                cache_write_tokens=start.cache_write_tokens,
            )
        return None


class _Messages:
    def __init__(self, owner: BudgetedAnthropic) -> None:
        self._owner = owner

    def _call(self, kwargs: dict[str, Any]) -> GuardedCall:
        model = kwargs["model"]
        prompt = count_anthropic_prompt(
            kwargs["messages"], model, system=kwargs.get("system"), tools=kwargs.get("tools")
        )
        return self._owner.guard.call(model, prompt_tokens=prompt, max_tokens=kwargs["max_tokens"])

    async def _start(self, call: GuardedCall) -> None:
        try:
            await call.start()
        except RationError as error:
            raise as_anthropic_error(error, self._owner.url) from error

    async def create(self, **kwargs: Any) -> Any:
        """`client.messages.create(...)`, guarded (same arguments and result)."""
        call = self._call(kwargs)
        await self._start(call)
        kwargs["max_tokens"] = call.max_tokens
        try:
            result = await self._owner.client.messages.create(**kwargs)
        except BaseException as error:
            await call.end(error)
            raise
        if kwargs.get("stream"):
            return GuardedStream(result, call, _EventUsage())
        await call.consume(usage_of(result.usage))
        return result

    def stream(self, **kwargs: Any) -> _StreamManager:
        """`async with client.messages.stream(...) as stream:`, guarded."""
        return _StreamManager(self, kwargs)


class _StreamManager:
    """Holds for the duration of an SDK message stream block."""

    def __init__(self, messages: _Messages, kwargs: dict[str, Any]) -> None:
        self._messages = messages
        self._kwargs = kwargs
        self._call: GuardedCall | None = None
        self._manager: Any = None
        self._stream: Any = None

    async def __aenter__(self) -> Any:
        call = self._call = self._messages._call(self._kwargs)
        await self._messages._start(call)
        self._kwargs["max_tokens"] = call.max_tokens
        try:
            self._manager = self._messages._owner.client.messages.stream(**self._kwargs)
            self._stream = await self._manager.__aenter__()
        except BaseException as error:
            await call.end(error)
            raise
        return self._stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._call is not None
        try:
            await self._manager.__aexit__(exc_type, exc, traceback)
        finally:
            snapshot = None
            with contextlib.suppress(AssertionError):  # no message_start was read
                snapshot = self._stream.current_message_snapshot
            if exc is None and snapshot is not None and snapshot.stop_reason is not None:
                await self._call.consume(usage_of(snapshot.usage))
            else:
                await self._call.end(exc or GeneratorExit())


class BudgetedAnthropic:
    """An AsyncAnthropic whose messages.create and messages.stream are guarded."""

    def __init__(self, client: anthropic.AsyncAnthropic, guard: BudgetGuard) -> None:
        self.client = client
        self.guard = guard
        self.messages = _Messages(self)

    @property
    def url(self) -> str:
        return f"{str(self.client.base_url).rstrip('/')}/v1/messages"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def budgeted(client: anthropic.AsyncAnthropic, guard: BudgetGuard) -> BudgetedAnthropic:
    """`client` with every message held against `guard`'s run."""
    return BudgetedAnthropic(client, guard)
