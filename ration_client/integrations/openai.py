"""OpenAI SDK: `budgeted(AsyncOpenAI(...), guard)` guards chat.completions and responses.

    client = budgeted(AsyncOpenAI(), BudgetGuard(budget, run_id))
    reply = await client.chat.completions.create(model=..., messages=..., max_tokens=512)

Each create() reserves the call's worst case (prompt counted with tiktoken, plus the max output
tokens, at catalog prices), sends the provider the max tokens that fit the grant, consumes the
reported usage and its cost, and releases the hold on an error, a timeout or a cancellation.
Streams are wrapped: chat streams get `stream_options.include_usage` so the usage arrives, and
the bill is consumed when the usage chunk (chat) or the final response event (responses) is
read; a stream closed or cancelled before that releases the hold. Budget refusals are raised as
openai's own errors: `ModelDeniedError` (a PermissionDeniedError, 403) and `BudgetExhaustedError`
/ `BudgetHeldError` (RateLimitError, 429), each with `.refusal`, the ration error. Every other
attribute of the client is passed through unguarded."""

from __future__ import annotations

from typing import Any

import openai

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
from ration_client.integrations.tokens import count_openai_input, count_openai_messages

__all__ = [
    "BudgetExhaustedError",
    "BudgetHeldError",
    "BudgetedOpenAI",
    "ModelDeniedError",
    "budgeted",
]


class ModelDeniedError(BudgetRefusal, openai.PermissionDeniedError):
    """The run's policy denies this model; nothing was sent to the provider."""


class BudgetExhaustedError(BudgetRefusal, openai.RateLimitError):
    """The run has no budget left for this call (or has failed, closed or is interrupted)."""


class BudgetHeldError(BudgetRefusal, openai.RateLimitError):
    """Open holds of the run take the room for now; retry after `refusal.retry_after_seconds`."""


_ERRORS: dict[Refusal, type[openai.APIStatusError]] = {
    Refusal.MODEL_DENIED: ModelDeniedError,
    Refusal.EXHAUSTED: BudgetExhaustedError,
    Refusal.RETRY_LATER: BudgetHeldError,
}


def as_openai_error(error: RationError, url: str) -> BaseException:
    """The openai error for a budget refusal (the error itself when it is not one)."""
    return status_error(_ERRORS, error, url, inner_body=True)


async def _start(call: GuardedCall, url: str) -> None:
    try:
        await call.start()
    except RationError as error:
        raise as_openai_error(error, url) from error


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _single_choice(kwargs: dict[str, Any]) -> None:
    n = _int_or_none(kwargs.get("n"))
    if n is not None and n > 1:
        raise ValueError("budgeted calls take n=1 (each choice would need its own max_tokens)")


def _chat_usage(item: Any) -> ModelUsage | None:
    usage = getattr(item, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return ModelUsage(usage.prompt_tokens, usage.completion_tokens, cache_read_tokens=cached)


def _response_usage(item: Any) -> ModelUsage | None:
    usage = getattr(item, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return ModelUsage(usage.input_tokens, usage.output_tokens, cache_read_tokens=cached)


def _response_event_usage(event: Any) -> ModelUsage | None:
    if getattr(event, "type", "") not in (
        "response.completed",
        "response.incomplete",
        "response.failed",
    ):
        return None
    return _response_usage(getattr(event, "response", None))


class _Completions:
    def __init__(self, owner: BudgetedOpenAI) -> None:
        self._owner = owner

    async def create(self, **kwargs: Any) -> Any:
        """`client.chat.completions.create(...)`, guarded (same arguments and result)."""
        owner, model = self._owner, kwargs["model"]
        _single_choice(kwargs)
        key = "max_tokens" if "max_tokens" in kwargs else "max_completion_tokens"
        prompt = count_openai_messages(
            kwargs["messages"],
            model,
            tools=kwargs.get("tools"),
            extra=kwargs.get("response_format"),
        )
        call = owner.guard.call(
            model, prompt_tokens=prompt, max_tokens=_int_or_none(kwargs.get(key))
        )
        await _start(call, owner.url("chat/completions"))
        kwargs[key] = call.max_tokens
        stream = bool(kwargs.get("stream"))
        if stream:
            kwargs["stream_options"] = {
                **(kwargs.get("stream_options") or {}),
                "include_usage": True,
            }
        try:
            result = await owner.client.chat.completions.create(**kwargs)
        except BaseException as error:
            await call.end(error)
            raise
        if stream:
            return GuardedStream(result, call, _chat_usage)
        await call.consume(_chat_usage(result) or call.worst_case)
        return result


class _Chat:
    def __init__(self, owner: BudgetedOpenAI) -> None:
        self.completions = _Completions(owner)


class _Responses:
    def __init__(self, owner: BudgetedOpenAI) -> None:
        self._owner = owner

    async def create(self, **kwargs: Any) -> Any:
        """`client.responses.create(...)`, guarded (same arguments and result)."""
        owner, model = self._owner, kwargs["model"]
        prompt = count_openai_input(
            kwargs.get("input"),
            model,
            instructions=kwargs.get("instructions"),
            tools=kwargs.get("tools"),
        )
        requested = _int_or_none(kwargs.get("max_output_tokens"))
        call = owner.guard.call(model, prompt_tokens=prompt, max_tokens=requested)
        await _start(call, owner.url("responses"))
        kwargs["max_output_tokens"] = call.max_tokens
        try:
            result = await owner.client.responses.create(**kwargs)
        except BaseException as error:
            await call.end(error)
            raise
        if kwargs.get("stream"):
            return GuardedStream(result, call, _response_event_usage)
        await call.consume(_response_usage(result) or call.worst_case)
        return result


class BudgetedOpenAI:
    """An AsyncOpenAI whose chat.completions.create and responses.create are guarded."""

    def __init__(self, client: openai.AsyncOpenAI, guard: BudgetGuard) -> None:
        self.client = client
        self.guard = guard
        self.chat = _Chat(self)
        self.responses = _Responses(self)

    def url(self, path: str) -> str:
        return f"{str(self.client.base_url).rstrip('/')}/{path}"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def budgeted(client: openai.AsyncOpenAI, guard: BudgetGuard) -> BudgetedOpenAI:
    """`client` with every chat completion and response held against `guard`'s run."""
    return BudgetedOpenAI(client, guard)
