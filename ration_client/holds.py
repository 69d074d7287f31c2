"""One hold around one call: the worst case reserved, the max_tokens that fits, never leaked."""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from types import TracebackType
from typing import TYPE_CHECKING

from ration_client._rpc import new_request_id
from ration_client.degraded import JournalEntry
from ration_client.errors import Unavailable
from ration_client.views import Amounts, ConsumeResult, ReservationInfo, ReserveMode, RunState

if TYPE_CHECKING:
    from datetime import datetime

    from ration_client.budget import BudgetClient

# USD per million tokens -> nanos of USD per token: * 10^9 / 10^6.
_NANOS_PER_MILLION_USD = 1000


def _price(value: Decimal | str | int, name: str) -> Decimal:
    if isinstance(value, float):
        raise TypeError(f"{name}: pass a Decimal, str or int, never a float")
    price = Decimal(str(value))
    if not price.is_finite() or price < 0:
        raise ValueError(f"{name} must be a finite amount >= 0, got {value}")
    return price


@dataclass(frozen=True)
class Prices:
    """A model's prices in USD per million tokens. They stay in the client: the service only
    ever sees the aggregate cost of an estimate or a bill (no pricing leaves this process)."""

    input_per_million: Decimal
    output_per_million: Decimal

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "input_per_million", _price(self.input_per_million, "input_per_million")
        )
        object.__setattr__(
            self, "output_per_million", _price(self.output_per_million, "output_per_million")
        )

    def input_nanos(self, tokens: int) -> Fraction:
        return Fraction(self.input_per_million) * _NANOS_PER_MILLION_USD * tokens

    def output_nanos(self, tokens: int) -> Fraction:
        return Fraction(self.output_per_million) * _NANOS_PER_MILLION_USD * tokens

    def cost_nanos(self, input_tokens: int, output_tokens: int) -> int:
        """What a call of these token counts costs, rounded up to a whole nano."""
        return math.ceil(self.input_nanos(input_tokens) + self.output_nanos(output_tokens))


@dataclass(frozen=True)
class WorstCase:
    """A model call bounded by its prompt and `max_output_tokens`: what it can cost at most."""

    prompt_tokens: int
    max_output_tokens: int
    prices: Prices | None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0 or self.max_output_tokens < 0:
            raise ValueError("prompt_tokens and max_output_tokens must be >= 0")

    @property
    def estimate(self) -> Amounts:
        """Prompt plus every output token, and (with prices) the cost of that."""
        tokens = self.prompt_tokens + self.max_output_tokens
        cost = 0
        if self.prices is not None:
            cost = self.prices.cost_nanos(self.prompt_tokens, self.max_output_tokens)
        return Amounts(tokens=tokens, cost_nanos=cost)

    def max_tokens(self, granted: Amounts) -> int:
        """The largest max_tokens for the model call whose worst case fits `granted` (an UP_TO
        grant may be less than the estimate): 0 when not even the prompt fits."""
        fits = min(self.max_output_tokens, granted.tokens - self.prompt_tokens)
        if self.prices is not None:
            left = granted.cost_nanos - self.prices.input_nanos(self.prompt_tokens)
            per_token = self.prices.output_nanos(1)
            if left < 0:
                fits = 0
            elif per_token > 0:
                fits = min(fits, math.floor(left / per_token))
        return max(fits, 0)


class Reservation:
    """One reservation around one call: granted amounts in, usage out, never leaked.

    `async with budget.call(...) as hold:` reserves on entry; `await hold.consume(usage)`
    records the bill and settles it; leaving the block without consume() releases it, also on
    exceptions and cancellation."""

    def __init__(
        self,
        client: BudgetClient,
        run_id: str,
        model: str,
        estimate: Amounts,
        ttl_seconds: int,
        mode: ReserveMode,
        worst_case: WorstCase | None = None,
    ) -> None:
        self._client = client
        self.run_id = run_id
        self.model = model
        self.estimate = estimate
        self._ttl = ttl_seconds
        self._mode = mode
        self._worst_case = worst_case
        self.reservation: ReservationInfo | None = None
        self.settled = False
        self.consumed: ConsumeResult | None = None
        # Fail-open: granted by the client's local allowance, the service being unreachable.
        self.local = False

    @property
    def reservation_id(self) -> str:
        return "" if self.reservation is None else self.reservation.reservation_id

    @property
    def granted(self) -> Amounts:
        """What the server holds for this call (zero before entry; the estimate when granted
        locally in fail-open mode)."""
        if self.local:
            return self.estimate
        return Amounts() if self.reservation is None else self.reservation.granted

    @property
    def expires_at(self) -> datetime | None:
        return None if self.reservation is None else self.reservation.expires_at

    @property
    def max_tokens(self) -> int | None:
        """With `max_output_tokens`: the max_tokens to give the model so that the call's worst
        case fits the grant (all of max_output_tokens unless an UP_TO grant is smaller). Never
        pass more, and the bill cannot overrun the hold. None without max_output_tokens."""
        if self._worst_case is None:
            return None
        return self._worst_case.max_tokens(self.granted)

    async def __aenter__(self) -> Reservation:
        degraded = self._client.degraded
        try:
            reply = await self._client.reserve(
                self.run_id,
                model=self.model,
                estimate=self.estimate,
                ttl_seconds=self._ttl,
                mode=self._mode,
            )
        except Unavailable:
            if degraded is None:
                raise
            degraded.grant(self.run_id, self.model, self.estimate)  # or FailOpenRefused
            self.local = True
            return self
        self.reservation = reply.reservation
        if degraded is not None and degraded.waiting:
            await self._client.replay_journal()  # the service answers again
        return self

    async def consume(self, usage: Amounts) -> ConsumeResult:
        """Records what the provider billed and settles the hold (never refused for budget).
        In fail-open mode a consume the service cannot take now is journaled and replayed
        later with the same request id (the result says `journaled`)."""
        degraded = self._client.degraded
        entry = JournalEntry(new_request_id(), self.run_id, self.model, usage, self.reservation_id)
        if self.local:
            assert degraded is not None
            degraded.give_back(self.run_id, self.estimate)
            degraded.journal(entry)  # on disk before it is sent
            self.settled = True
            self.consumed = await self._client.send_journaled(entry)
            return self.consumed
        try:
            self.consumed = await self._client.consume(
                self.run_id,
                usage=usage,
                model=self.model,
                reservation_id=self.reservation_id,
                request_id=entry.request_id,
            )
        except Unavailable:
            if degraded is None:
                raise
            degraded.journal(entry)  # the same request id: applied once if it did land
            self.consumed = journaled_result()
        self.settled = True
        return self.consumed

    async def release(self) -> None:
        if self.settled:
            return
        if self.local:
            assert self._client.degraded is not None
            self._client.degraded.give_back(self.run_id, self.estimate)
        else:
            await self._client.release(self.run_id, self.reservation_id)
        self.settled = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.settled or self.reservation is None:
            return
        # Shielded so a cancelled task still releases; if the service is unreachable the hold
        # expires on its own at expires_at.
        release = asyncio.ensure_future(self.release())
        with contextlib.suppress(Unavailable):
            await asyncio.shield(release)


def journaled_result() -> ConsumeResult:
    """The result of a consume kept in the fail-open journal: nothing is known of the run yet."""
    return ConsumeResult(
        overrun=Amounts(),
        dimensions=(),
        state=RunState.ACTIVE,
        reservation_state=None,
        journaled=True,
    )


# The name this context manager had in earlier releases (DESIGN 3.9 says "hold"): kept so
# that existing callers keep importing it.
Hold = Reservation
