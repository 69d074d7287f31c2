"""The framework-neutral guard every integration uses: worst-case hold, capped max_tokens, bill.

One `BudgetGuard` per run: `guard.call(model, prompt_tokens=…, max_tokens=…)` is an async
context manager around one model call. On entry it reserves the worst case (prompt plus
max_tokens tokens, and their catalog cost) on the existing `budget.call` hold, and
`call.max_tokens` is then what to send the provider (capped to an UP_TO grant). Inside,
`await call.consume(ModelUsage(...))` records the provider's reported usage and its cost; leaving
without consume (an error, a timeout, a cancellation) releases the hold. Integrations map
`Refusal` kinds to their framework's own error types."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import grpc

from ration_client.errors import (
    BudgetExhausted,
    BudgetHeld,
    ModelDenied,
    RationError,
    RunClosed,
    RunFailed,
    RunInterrupted,
)
from ration_client.holds import Reservation
from ration_client.prices import ModelUsage, PriceCatalog
from ration_client.views import Amounts, ConsumeResult, ReserveMode

if TYPE_CHECKING:
    from ration_client.budget import BudgetClient

__all__ = [
    "BudgetGuard",
    "BudgetRefusal",
    "GuardedCall",
    "GuardedStream",
    "ModelUsage",
    "Refusal",
    "refusal_body",
    "refusal_of",
]

DEFAULT_MAX_TOKENS = 4096
T = TypeVar("T")


class Refusal(enum.StrEnum):
    """Why the budget refused a call, as frameworks tell errors apart."""

    MODEL_DENIED = "model_denied"  # the model is not allowed: a permission error, final
    EXHAUSTED = "exhausted"  # the run has no budget left (or failed, closed, interrupted)
    RETRY_LATER = "retry_later"  # open holds take the room for now (BUDGET_HELD)


def refusal_of(error: BaseException) -> Refusal | None:
    """The kind of budget refusal `error` is, or None when it is not one."""
    if isinstance(error, ModelDenied):
        return Refusal.MODEL_DENIED
    if isinstance(error, BudgetHeld):
        return Refusal.RETRY_LATER
    if isinstance(error, BudgetExhausted | RunFailed | RunInterrupted | RunClosed):
        return Refusal.EXHAUSTED
    return None


class BudgetRefusal:
    """Mixed into each framework's own error types: the ration refusal behind the error.
    `refusal` is the typed `RationError` (reason, metadata such as model, dimension, limit);
    `kind` is its `Refusal`."""

    refusal: RationError
    kind: Refusal

    def _set_refusal(self, refusal: RationError, kind: Refusal) -> None:
        self.refusal = refusal
        self.kind = kind


# What each kind looks like on the wire of an HTTP API (status and error type).
HTTP_STATUS: Mapping[Refusal, int] = {
    Refusal.MODEL_DENIED: 403,
    Refusal.EXHAUSTED: 429,
    Refusal.RETRY_LATER: 429,
}


def refusal_body(refusal: RationError, kind: Refusal) -> dict[str, object]:
    """An OpenAI/Anthropic-shaped error body for a refusal (no prices: aggregate amounts only)."""
    return {
        "type": "error",
        "error": {
            "type": f"ration_{kind.value}",
            "code": refusal.reason,
            "message": refusal.message or str(refusal),
            "metadata": dict(refusal.metadata),
        },
    }


def _grant_too_small(model: str) -> BudgetExhausted:
    """An UP_TO grant that does not cover even the prompt: refused on this side, like the
    server refuses a breach (the hold is released before this is raised)."""
    return BudgetExhausted(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "BUDGET_EXHAUSTED",
        f"the grant left for this run does not cover the prompt of a {model} call",
        {},
        [],
    )


class BudgetGuard:
    """Budgets for one run's model calls.

    `prices` defaults to the genai-prices catalog (an unknown model is `UnknownModel`; give
    overrides for private models). `mode` UP_TO lets the last calls of a run go through with a
    smaller max_tokens; ALL_OR_NOTHING refuses a call whose worst case does not fit.
    `default_max_tokens` bounds calls that pass no max_tokens of their own."""

    def __init__(
        self,
        budget: BudgetClient,
        run_id: str,
        *,
        prices: PriceCatalog | None = None,
        mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        ttl_seconds: int = 0,
    ) -> None:
        self.budget = budget
        self.run_id = run_id
        self.prices = prices if prices is not None else PriceCatalog()
        self.mode = mode
        self.default_max_tokens = default_max_tokens
        self.ttl_seconds = ttl_seconds

    def call(self, model: str, *, prompt_tokens: int, max_tokens: int | None) -> GuardedCall:
        """One model call of `prompt_tokens` (counted with `ration_client.integrations.tokens`)
        and at most `max_tokens` output tokens (default_max_tokens when None)."""
        limit = self.default_max_tokens if max_tokens is None else max_tokens
        return GuardedCall(self, model, prompt_tokens, limit)


class GuardedCall:
    """One guarded model call (see the module docstring). `start()`/`end(error)` are the same
    as entering and leaving the block, for wrappers whose call outlives one block (streams)."""

    def __init__(self, guard: BudgetGuard, model: str, prompt_tokens: int, max_tokens: int):
        self.guard = guard
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.requested_max_tokens = max_tokens
        prices = guard.prices.prices(model, prompt_tokens)  # UnknownModel before any RPC
        self.hold: Reservation = guard.budget.call(
            guard.run_id,
            model=model,
            prompt_tokens=prompt_tokens,
            max_output_tokens=max_tokens,
            prices=prices,
            ttl_seconds=guard.ttl_seconds,
            mode=guard.mode,
        )
        self.usage: ModelUsage | None = None
        self._consuming: asyncio.Future[ConsumeResult] | None = None

    @property
    def max_tokens(self) -> int:
        """The max_tokens to send: what was asked, or less when an UP_TO grant is smaller."""
        capped = self.hold.max_tokens
        return self.requested_max_tokens if capped is None else capped

    @property
    def settled(self) -> bool:
        return self.hold.settled

    async def start(self) -> GuardedCall:
        await self.hold.__aenter__()
        if self.max_tokens <= 0:
            await self.hold.release()
            raise _grant_too_small(self.model)
        return self

    @property
    def worst_case(self) -> ModelUsage:
        """The usage to bill when the provider reported none: everything that was allowed."""
        return ModelUsage(self.prompt_tokens, self.max_tokens)

    async def consume(self, usage: ModelUsage) -> ConsumeResult:
        """Records the provider's reported usage and what it cost; settles the hold. Shielded:
        the provider billed the call, so a cancellation does not lose the bill."""
        self.usage = usage
        cost = self.guard.prices.cost_nanos(self.model, usage)
        amounts = Amounts(tokens=usage.tokens, cost_nanos=cost)
        self._consuming = asyncio.ensure_future(self.hold.consume(amounts))
        return await asyncio.shield(self._consuming)

    async def end(self, error: BaseException | None = None) -> None:
        """Releases the hold unless it was consumed (shielded: a cancelled task releases too)."""
        if self._consuming is not None:
            with contextlib.suppress(Exception):  # its own caller saw the outcome
                await asyncio.shield(self._consuming)
            return
        await self.hold.__aexit__(type(error) if error else None, error, None)

    async def __aenter__(self) -> GuardedCall:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.end(exc)


class GuardedStream(Generic[T]):
    """A provider stream whose hold is consumed when the final usage arrives, released if the
    stream ends, fails or is cancelled before; iterate it like the SDK's stream."""

    def __init__(
        self, stream: Any, call: GuardedCall, usage_of: Callable[[T], ModelUsage | None]
    ) -> None:
        self._stream = stream
        self._iterator = stream.__aiter__()
        self.call = call
        self._usage_of = usage_of
        self._done = False

    @property
    def response(self) -> Any:
        return self._stream.response

    def __aiter__(self) -> GuardedStream[T]:
        return self

    async def __anext__(self) -> T:
        try:
            item: T = await self._iterator.__anext__()
        except StopAsyncIteration:
            await self._finish(None, None)
            raise
        except BaseException as error:
            await self._finish(None, error)
            raise
        usage = self._usage_of(item)
        if usage is not None:
            await self._finish(usage, None)
        return item

    async def _finish(self, usage: ModelUsage | None, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        if usage is not None:
            await self.call.consume(usage)
        elif error is None and not self.call.settled:
            # The stream ended without reporting usage: bill everything that was allowed.
            await self.call.consume(self.call.worst_case)
        else:
            await self.call.end(error)

    async def close(self) -> None:
        """Closes the provider stream; the hold is released unless its usage was read."""
        try:
            await self._stream.close()
        finally:
            if not self._done:
                self._done = True
                await self.call.end(GeneratorExit())

    async def __aenter__(self) -> GuardedStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
