"""ListMemory's run_id clamp: the run's remaining tokens from budget_service Check (adapter)."""

from __future__ import annotations

from typing import Protocol

import grpc

from memory_service.domain.refusals import (
    budget_link_unavailable,
    budget_unavailable,
    run_not_found,
)
from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc
from servicekit.errors import FieldViolation, validation_error

CHECK_TIMEOUT_SECONDS = 1.0


class RemainingTokens(Protocol):
    async def remaining_tokens(self, run_id: str, authorization: str | None) -> int | None:
        """The run's remaining tokens (the tightest of its limits and pools); None if unbounded."""
        ...


class BudgetLink:
    """A Check-only client of budget_service: never reserves or consumes (DESIGN 4.5).

    The caller's own authorization header is forwarded, so budget_service resolves the run in
    the caller's tenant, exactly as if the caller had asked it directly.
    """

    def __init__(self, address: str, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
        self._address = address
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> budget_service_pb2_grpc.BudgetServiceStub:
        if self._channel is None:  # created on first use, inside the serving event loop
            self._channel = grpc.aio.insecure_channel(self._address)
        return budget_service_pb2_grpc.BudgetServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def remaining_tokens(self, run_id: str, authorization: str | None) -> int | None:
        metadata = (("authorization", authorization),) if authorization else ()
        try:
            reply = await self._stub().Check(
                budget_pb2.CheckRequest(run_id=run_id), timeout=self._timeout, metadata=metadata
            )
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code == grpc.StatusCode.NOT_FOUND:
                raise run_not_found() from None
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise validation_error(
                    [FieldViolation("run_id", "is not a run id budget_service accepts")]
                ) from None
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise budget_link_unavailable(
                    f"budget_service refused the caller's credentials ({code.name})"
                ) from None
            raise budget_unavailable(code.name) from None
        remaining = [
            d.remaining
            for d in reply.dimensions
            if d.dimension == budget_pb2.DIMENSION_TOKENS and d.HasField("remaining")
        ]
        return min(remaining) if remaining else None

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
