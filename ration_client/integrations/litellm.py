"""LiteLLM: `RationLogger`, a CustomLogger holding every completion against a ration run.

SDK:   litellm.callbacks = [RationLogger(budget, run_id="run-1")]
       await litellm.acompletion(model="gpt-4o", messages=..., max_tokens=256,
                                 metadata={"ration_run_id": "run-1"})   # per-call run, optional
Proxy: see the README (a module exposing an instance, named in `litellm_settings.callbacks`).

Before a request is sent (`async_pre_call_deployment_hook`, which both the SDK and the proxy run
once a deployment is chosen) it reserves the call's worst case and caps `max_tokens` to the grant
(streams get `stream_options.include_usage`); a refusal raises LiteLLM's own errors:
`ModelDeniedError` (litellm.PermissionDeniedError), `BudgetExhaustedError`
(litellm.BudgetExceededError) or `BudgetHeldError` (litellm.RateLimitError), with `.refusal`.
A complete reply is consumed (reported usage, catalog prices) before LiteLLM returns it; a
stream by the success event LiteLLM sends once it was read; the failure event releases.
LiteLLM sends no event for a call whose task is cancelled mid-stream, so each hold is also
released when the task that made the call ends while it is still open. Events run in background
tasks: `await logger.settled()` waits until every hold was consumed or released.

The model name given to the budget and the catalog is LiteLLM's without its provider prefix
("openai/gpt-4o" -> "gpt-4o")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import litellm
from litellm.integrations.custom_logger import CustomLogger

from ration_client.budget import BudgetClient
from ration_client.errors import RationError
from ration_client.integrations.core import (
    HTTP_STATUS,
    BudgetGuard,
    BudgetRefusal,
    GuardedCall,
    ModelUsage,
    Refusal,
    refusal_body,
    refusal_of,
)
from ration_client.integrations.tokens import count_openai_messages
from ration_client.prices import PriceCatalog
from ration_client.views import ReserveMode

__all__ = [
    "BudgetExhaustedError",
    "BudgetHeldError",
    "ModelDeniedError",
    "RationLogger",
]

RUN_ID_KEY = "ration_run_id"


class ModelDeniedError(BudgetRefusal, litellm.PermissionDeniedError):
    """The run's policy denies this model; nothing was sent to the provider."""


class BudgetExhaustedError(BudgetRefusal, litellm.BudgetExceededError):
    """The run has no budget left for this call (or has failed, closed or is interrupted)."""


class BudgetHeldError(BudgetRefusal, litellm.RateLimitError):
    """Open holds of the run take the room for now; retry after `refusal.retry_after_seconds`."""


def as_litellm_error(error: RationError, model: str) -> BaseException:
    """LiteLLM's error for a budget refusal (the error itself when it is not one)."""
    kind = refusal_of(error)
    if kind is None:
        return error
    mapped: BaseException
    if kind is Refusal.MODEL_DENIED:
        response = httpx.Response(
            HTTP_STATUS[kind],
            request=httpx.Request("POST", "https://ration.invalid/"),
            json=refusal_body(error, kind),
        )
        mapped = ModelDeniedError(str(error), "ration", model, response=response)
    elif kind is Refusal.EXHAUSTED:
        mapped = BudgetExhaustedError(0.0, 0.0, message=str(error), llm_provider="ration")
    else:
        mapped = BudgetHeldError(str(error), "ration", model)
    assert isinstance(mapped, BudgetRefusal)
    mapped._set_refusal(error, kind)
    return mapped


def _model_name(model: str) -> str:
    return model.rsplit("/", 1)[-1]


def _call_id(kwargs: dict[str, Any]) -> str:
    found = kwargs.get("litellm_call_id") or (kwargs.get("litellm_params") or {}).get(
        "litellm_call_id"
    )
    return str(found or "")


def _usage(response: Any) -> ModelUsage | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return ModelUsage(
        usage.prompt_tokens or 0, usage.completion_tokens or 0, cache_read_tokens=cached
    )


@dataclass
class _Open:
    """A call between its pre-call hook and its success or failure event."""

    call: GuardedCall
    task: asyncio.Task[Any] | None
    on_task_done: Callable[[object], None]


class RationLogger(CustomLogger):
    """Budgets for LiteLLM calls (see the module docstring). `run_id` is the default run; a
    call's `metadata={"ration_run_id": ...}` names another. Calls with neither are refused
    (ValueError): an unbudgeted call is never let through silently."""

    def __init__(
        self,
        budget: BudgetClient,
        *,
        run_id: str = "",
        prices: PriceCatalog | None = None,
        mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
        default_max_tokens: int = 4096,
        ttl_seconds: int = 0,
    ) -> None:
        super().__init__()
        self.budget = budget
        self.run_id = run_id
        self.prices = prices if prices is not None else PriceCatalog()
        self.mode = mode
        self.default_max_tokens = default_max_tokens
        self.ttl_seconds = ttl_seconds
        self._open: dict[str, _Open] = {}
        self._pending: set[asyncio.Future[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def _guard(self, run_id: str) -> BudgetGuard:
        return BudgetGuard(
            self.budget,
            run_id,
            prices=self.prices,
            mode=self.mode,
            default_max_tokens=self.default_max_tokens,
            ttl_seconds=self.ttl_seconds,
        )

    def _run_id(self, kwargs: dict[str, Any]) -> str:
        for holder in (kwargs.get("metadata"), kwargs.get("litellm_metadata")):
            if isinstance(holder, dict) and holder.get(RUN_ID_KEY):
                return str(holder[RUN_ID_KEY])
        if not self.run_id:
            raise ValueError(f"no ration run: pass metadata={{{RUN_ID_KEY!r}: ...}}")
        return self.run_id

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> dict[str, Any] | None:
        messages = kwargs.get("messages")
        call_id = _call_id(kwargs)
        if messages is None or not call_id:
            return None  # not a chat completion: embeddings, images … are not budgeted here
        model = _model_name(str(kwargs["model"]))
        key = "max_tokens" if "max_tokens" in kwargs else "max_completion_tokens"
        requested = kwargs.get(key)
        prompt = count_openai_messages(messages, model, tools=kwargs.get("tools"))
        call = self._guard(self._run_id(kwargs)).call(
            model,
            prompt_tokens=prompt,
            max_tokens=requested if isinstance(requested, int) else None,
        )
        try:
            await call.start()
        except RationError as error:
            raise as_litellm_error(error, model) from error
        task = asyncio.current_task()
        self._open[call_id] = _Open(call, task, lambda _: self._release_later(call_id))
        self._idle.clear()
        if task is not None:  # a cancelled caller gets no event from LiteLLM
            task.add_done_callback(self._open[call_id].on_task_done)
        kwargs[key] = call.max_tokens
        if kwargs.get("stream"):
            kwargs["stream_options"] = {
                **(kwargs.get("stream_options") or {}),
                "include_usage": True,
            }
        return kwargs

    def _take(self, call_id: str) -> GuardedCall | None:
        found = self._open.pop(call_id, None)
        if found is None:
            return None
        if found.task is not None:
            found.task.remove_done_callback(found.on_task_done)
        return found.call

    def _settle(self, work: Any) -> asyncio.Future[Any]:
        """Runs a consume or release to its end even if the event's task is cancelled."""
        future = asyncio.ensure_future(work)
        self._pending.add(future)

        def done(_: object) -> None:
            self._pending.discard(future)
            if not self._open and not self._pending:
                self._idle.set()

        future.add_done_callback(done)
        return future

    def _release_later(self, call_id: str) -> None:
        call = self._take(call_id)
        if call is not None:
            self._settle(call.end(asyncio.CancelledError()))

    async def async_post_call_success_deployment_hook(
        self, request_data: dict[str, Any], response: Any, call_type: Any
    ) -> Any:
        """Consumes a complete (non-streamed) reply before LiteLLM returns it, so the caller's
        next call already sees the bill; streams are consumed by the success event."""
        usage = _usage(response)
        call_id = _call_id(request_data)
        if usage is None or call_id not in self._open:
            return None
        call = self._take(call_id)
        assert call is not None
        await asyncio.shield(self._settle(call.consume(usage)))
        return None

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        call = self._take(_call_id(kwargs))
        if call is None:
            return
        usage = _usage(response_obj) or _usage(kwargs.get("complete_streaming_response"))
        await asyncio.shield(self._settle(call.consume(usage or call.worst_case)))

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        call = self._take(_call_id(kwargs))
        if call is not None:
            error = kwargs.get("exception") or RuntimeError("call failed")
            await asyncio.shield(self._settle(call.end(error)))

    async def settled(self) -> None:
        """Waits until every call made so far got its event and its hold was consumed or
        released (call it after the calls returned and their streams were read)."""
        await self._idle.wait()

    @property
    def open_holds(self) -> int:
        """Holds of calls still in flight (no success or failure event yet)."""
        return len(self._open)
