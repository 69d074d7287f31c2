"""What the framework integrations share: tool calls under the budget, refusals re-raised."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from ration_client.errors import RationError
from ration_client.integrations.core import BudgetGuard, Refusal, refusal_of
from ration_client.views import Amounts, ConsumeResult

# A framework's own error type for a refusal: built from the service's error and its kind.
ErrorType = Callable[[RationError, Refusal], BaseException]


async def count_tool_call(guard: BudgetGuard) -> ConsumeResult:
    """Counts one tool call of the guard's run before the tool runs: reserved, then consumed at
    once, so a refused tool never runs and no tool hold stays open while it runs. Raises the
    service's refusal (`BudgetExhausted` naming toolCalls, `RunFailed`, …)."""
    async with guard.budget.tool_call(guard.run_id, ttl_seconds=guard.ttl_seconds) as hold:
        return await hold.consume(Amounts(tool_calls=1))


def framework_error(error: RationError, error_type: ErrorType) -> BaseException | None:
    """The framework's error for a budget refusal; None for any other failure (unavailable,
    invalid, …), which the caller re-raises as it is."""
    kind = refusal_of(error)
    return None if kind is None else error_type(error, kind)


@contextlib.asynccontextmanager
async def refusals_as(error_type: ErrorType) -> AsyncIterator[None]:
    """Re-raises the budget refusals of the block as `error_type` (the service's error as the
    cause); other errors pass unchanged."""
    try:
        yield
    except RationError as error:
        raised = framework_error(error, error_type)
        if raised is None:
            raise
        raise raised from error
