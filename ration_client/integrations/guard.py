"""One run's budget around each model and tool call, shared by the framework integrations.

A model call holds its worst case (prompt tokens plus `max_tokens` and, with prices, what they
cost at most), is told the `max_tokens` that fits the grant, and settles with the provider's
reported usage; leaving the block without settling releases the hold, also on errors and
cancellation. A tool call is reserved then consumed at once (one `toolCalls` unit), so a refused
tool never runs and no tool hold stays open while it runs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from ration_client.budget import BudgetClient
from ration_client.errors import BudgetExhausted
from ration_client.holds import Prices, Reservation
from ration_client.views import Amounts, ConsumeResult, ReserveMode

# Tokens a chat message costs beyond its text (role, separators): OpenAI documents 3 to 4.
MESSAGE_OVERHEAD_TOKENS = 4


def utf8_bound(text: str) -> int:
    """An upper bound on the tokens of `text` for any byte-level BPE encoding (o200k_base,
    cl100k_base, Claude's): every token covers at least one UTF-8 byte."""
    return len(text.encode("utf-8"))


def prompt_text(*parts: Any) -> str:
    """Everything a request sends as prompt (instructions, messages, tool schemas) as one text:
    strings as they are, anything else as JSON (its punctuation only adds to the bound)."""
    texts = []
    for part in parts:
        if part is None:
            continue
        texts.append(part if isinstance(part, str) else json.dumps(part, default=str))
    return "\n".join(texts)


@dataclass(frozen=True)
class Usage:
    """What the provider reported for one call."""

    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelCall:
    """One held model call: `max_tokens` to send, `settle(usage)` after the reply."""

    def __init__(self, hold: Reservation, prices: Prices | None, prompt_tokens: int) -> None:
        self.hold = hold
        self.prices = prices
        self.prompt_tokens = prompt_tokens
        self.result: ConsumeResult | None = None

    @property
    def max_tokens(self) -> int:
        return self.hold.max_tokens or 0

    @property
    def reservation_id(self) -> str:
        return self.hold.reservation_id

    @property
    def worst_case(self) -> Usage:
        """The most the call can bill: its prompt bound and every output token it may have."""
        return Usage(self.prompt_tokens, self.max_tokens)

    async def release(self) -> None:
        """Gives the hold back (nothing was billed); a no-op once settled."""
        await self.hold.release()

    async def settle(self, usage: Usage) -> ConsumeResult:
        """Consumes what the provider billed: its tokens and, with prices, their cost."""
        cost = 0 if self.prices is None else self.prices.cost_nanos(*_split(usage))
        self.result = await self.hold.consume(Amounts(tokens=usage.tokens, cost_nanos=cost))
        return self.result


def _split(usage: Usage) -> tuple[int, int]:
    return usage.input_tokens, usage.output_tokens


class RunBudget:
    """The budget of one ration run, for an integration to wrap each call in.

    `prices`: one `Prices` for every model, or a mapping model -> `Prices`; a model missing from
    the mapping is an error (never a silent zero). Without prices only tokens are held and
    consumed. `count_tokens` bounds a prompt's tokens from its text (default: its UTF-8 bytes,
    an upper bound for byte-level BPE encodings). `default_max_tokens` is the worst case of a
    call that names no `max_tokens`. Under `ReserveMode.UP_TO` (the default) a call is granted
    what is left and its `max_tokens` capped to fit; a grant with room for no output token is
    released and refused as `BudgetExhausted`."""

    def __init__(
        self,
        budget: BudgetClient,
        run_id: str,
        *,
        prices: Prices | Mapping[str, Prices] | None = None,
        count_tokens: Callable[[str], int] = utf8_bound,
        default_max_tokens: int = 4096,
        mode: ReserveMode = ReserveMode.UP_TO,
        ttl_seconds: int = 0,
    ) -> None:
        self.budget = budget
        self.run_id = run_id
        self._prices = prices
        self.count_tokens = count_tokens
        self.default_max_tokens = default_max_tokens
        self.mode = mode
        self.ttl_seconds = ttl_seconds

    def prices_of(self, model: str) -> Prices | None:
        if self._prices is None or isinstance(self._prices, Prices):
            return self._prices
        try:
            return self._prices[model]
        except KeyError:
            raise LookupError(f"no prices for model {model!r}: add it to prices=") from None

    def prompt_tokens(self, *parts: Any, messages: int = 1) -> int:
        return self.count_tokens(prompt_text(*parts)) + MESSAGE_OVERHEAD_TOKENS * messages

    async def start_model_call(
        self,
        model: str,
        prompt_tokens: int,
        max_tokens: int | None,
        *,
        mode: ReserveMode | None = None,
    ) -> ModelCall:
        """Holds the call's worst case and returns it with the `max_tokens` that fits; the
        caller must `settle` or `release` it. Raises the service's refusal (`BudgetExhausted`,
        `ModelDenied`, …) before anything is sent. `mode` overrides the budget's (a caller
        that cannot cap the request's max_tokens passes ALL_OR_NOTHING)."""
        prices = self.prices_of(model)
        hold = self.budget.call(
            self.run_id,
            model=model,
            prompt_tokens=prompt_tokens,
            max_output_tokens=self.default_max_tokens if max_tokens is None else max_tokens,
            prices=prices,
            ttl_seconds=self.ttl_seconds,
            mode=mode or self.mode,
        )
        await hold.__aenter__()
        if not hold.max_tokens:
            await hold.release()
            raise _no_room(hold, prompt_tokens)
        return ModelCall(hold, prices, prompt_tokens)

    @contextlib.asynccontextmanager
    async def model_call(
        self, model: str, prompt_tokens: int, max_tokens: int | None
    ) -> AsyncIterator[ModelCall]:
        """`start_model_call` as a block: leaving it without settling releases the hold, also
        on errors and cancellation."""
        call = await self.start_model_call(model, prompt_tokens, max_tokens)
        try:
            yield call
        finally:
            # Releases what was not consumed, shielded from a cancellation of this task.
            await call.hold.__aexit__(None, None, None)

    async def tool_call(self) -> ConsumeResult:
        """Counts one tool call, refused (`BudgetExhausted`) before the tool runs when the run
        has none left."""
        async with self.budget.tool_call(self.run_id, ttl_seconds=self.ttl_seconds) as hold:
            return await hold.consume(Amounts(tool_calls=1))


def _no_room(hold: Reservation, prompt_tokens: int) -> BudgetExhausted:
    granted = hold.granted
    message = (
        f"the grant ({granted.tokens} tokens, {granted.cost} USD) leaves no room for an output "
        f"token after a prompt of {prompt_tokens}"
    )
    # The grant is what was left of the binding dimension: tokens, unless the prompt fit them.
    if granted.tokens > prompt_tokens:
        metadata = {"dimension": "cost", "limit": str(granted.cost), "scope": "run"}
    else:
        metadata = {"dimension": "tokens", "limit": str(granted.tokens), "scope": "run"}
        metadata["observed"] = str(prompt_tokens + 1)
    return BudgetExhausted(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXHAUSTED", message, metadata, []
    )
