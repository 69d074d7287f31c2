"""BudgetClient: the budget service for orchestrators, with a hold helper around each call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import grpc

from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc
from ration_client._rpc import Client, new_request_id
from ration_client.errors import Unavailable, decode

Amounts = budget_pb2.Amounts
BudgetPolicy = budget_pb2.BudgetPolicy
ModelPatterns = budget_pb2.ModelPatterns
NANOS_PER_USD = 1_000_000_000


def usd(amount: str | int) -> int:
    """Exact USD → nanos from a decimal string or int (never a float): usd("0.25")."""
    from decimal import Decimal

    nanos = Decimal(str(amount)) * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise ValueError(f"{amount} USD is finer than a nano")
    return int(nanos)


class BudgetClient(Client):
    """Async client; address and token default to RATION_BUDGET_ADDRESS and RATION_TOKEN."""

    ADDRESS_VARIABLE = "RATION_BUDGET_ADDRESS"
    DEFAULT_ADDRESS = "127.0.0.1:50051"

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 5.0,
        interceptors: list[Any] | None = None,
        attempts: int = 4,
    ) -> None:
        super().__init__(
            address, token=token, timeout=timeout, interceptors=interceptors, attempts=attempts
        )
        self._stub = budget_service_pb2_grpc.BudgetServiceStub(self._rpc.channel)  # type: ignore[no-untyped-call]

    async def open_run(
        self,
        run_id: str,
        *,
        project_id: str,
        workflow_id: str = "",
        agent_id: str = "",
        policy: budget_pb2.BudgetPolicy | None = None,
        request_id: str | None = None,
    ) -> budget_pb2.Run:
        request = budget_pb2.OpenRunRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            project_id=project_id,
            workflow_id=workflow_id,
            agent_id=agent_id,
            policy=policy,
        )
        return (await self._rpc.unary(self._stub.OpenRun, request)).run

    async def get_run(self, run_id: str) -> budget_pb2.Run:
        request = budget_pb2.GetRunRequest(run_id=run_id)
        return (await self._rpc.unary(self._stub.GetRun, request)).run

    async def reserve(
        self,
        run_id: str,
        *,
        model: str,
        estimate: budget_pb2.Amounts,
        ttl_seconds: int = 0,
        mode: budget_pb2.ReserveMode = budget_pb2.RESERVE_MODE_ALL_OR_NOTHING,
        request_id: str | None = None,
    ) -> budget_pb2.ReserveResponse:
        request = budget_pb2.ReserveRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            model=model,
            estimate=estimate,
            ttl_seconds=ttl_seconds,
            mode=mode,
        )
        return await self._rpc.unary(self._stub.Reserve, request)

    async def consume(
        self,
        run_id: str,
        *,
        usage: budget_pb2.Amounts,
        model: str = "",
        reservation_id: str = "",
        request_id: str | None = None,
    ) -> budget_pb2.ConsumeResponse:
        request = budget_pb2.ConsumeRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            reservation_id=reservation_id,
            model=model,
            usage=usage,
        )
        return await self._rpc.unary(self._stub.Consume, request)

    async def release(
        self, run_id: str, reservation_id: str, *, request_id: str | None = None
    ) -> budget_pb2.Reservation:
        request = budget_pb2.ReleaseRequest(
            request_id=request_id or new_request_id(), run_id=run_id, reservation_id=reservation_id
        )
        return (await self._rpc.unary(self._stub.Release, request)).reservation

    async def check(
        self,
        run_id: str,
        *,
        estimate: budget_pb2.Amounts | None = None,
        model: str = "",
        authorization: str | None = None,
    ) -> budget_pb2.CheckResponse:
        """The run's balances; `authorization` forwards a caller's own header instead of this
        client's token (the memory service's ListMemory clamp checks in its caller's tenant)."""
        request = budget_pb2.CheckRequest(run_id=run_id, estimate=estimate, model=model)
        return await self._rpc.unary(self._stub.Check, request, authorization=authorization)

    async def remaining_tokens(
        self, run_id: str, *, authorization: str | None = None
    ) -> int | None:
        """The run's remaining tokens, the tightest of its limits and pools (Check); None when
        no limit bounds its tokens."""
        reply = await self.check(run_id, authorization=authorization)
        remaining = [
            d.remaining
            for d in reply.dimensions
            if d.dimension == budget_pb2.DIMENSION_TOKENS and d.HasField("remaining")
        ]
        return min(remaining) if remaining else None

    async def close_run(
        self,
        run_id: str,
        outcome: budget_pb2.RunOutcome = budget_pb2.RUN_OUTCOME_SUCCEEDED,
        *,
        request_id: str | None = None,
    ) -> budget_pb2.CloseRunResponse:
        request = budget_pb2.CloseRunRequest(
            request_id=request_id or new_request_id(), run_id=run_id, outcome=outcome
        )
        return await self._rpc.unary(self._stub.CloseRun, request)

    async def resume_run(
        self,
        run_id: str,
        *,
        delta: budget_pb2.Amounts,
        approver: str,
        request_id: str | None = None,
    ) -> budget_pb2.Run:
        """Approves an INTERRUPTED run (admin or approver token). The server records the
        token's principal as the approver; `approver` is only a note (no secrets)."""
        request = budget_pb2.ResumeRunRequest(
            request_id=request_id or new_request_id(), run_id=run_id, delta=delta, approver=approver
        )
        return (await self._rpc.unary(self._stub.ResumeRun, request)).run

    async def list_events(self, run_id: str, after_seq: int = 0) -> list[budget_pb2.RunEvent]:
        """Every event after `after_seq`, following pages."""
        events: list[budget_pb2.RunEvent] = []
        token = ""
        while True:
            request = budget_pb2.ListRunEventsRequest(
                run_id=run_id, after_seq=after_seq, page_size=500, page_token=token
            )
            reply = await self._rpc.unary(self._stub.ListRunEvents, request)
            events.extend(reply.events)
            token = reply.next_page_token
            if not token:
                return events

    async def watch(
        self, run_id: str, after_seq: int = 0, *, max_reconnects: int = 20
    ) -> AsyncIterator[budget_pb2.RunEvent]:
        """Follows WatchRunEvents, resuming after the last seq seen when the stream drops."""
        last, reconnects = after_seq, 0
        while True:
            request = budget_pb2.WatchRunEventsRequest(run_id=run_id, after_seq=last)
            stream = self._stub.WatchRunEvents(request, metadata=self._rpc.metadata)
            try:
                async for reply in stream:
                    reconnects = 0
                    last = reply.event.seq
                    yield reply.event
                return
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or reconnects >= max_reconnects:
                    raise decode(error) from None
                reconnects += 1
                await asyncio.sleep(min(0.05 * 2**reconnects, 2.0))
            finally:
                stream.cancel()

    def call(
        self,
        run_id: str,
        *,
        model: str,
        estimate: budget_pb2.Amounts,
        ttl_seconds: int = 0,
        mode: budget_pb2.ReserveMode = budget_pb2.RESERVE_MODE_ALL_OR_NOTHING,
    ) -> Reservation:
        """`async with budget.call(run_id, model=…, estimate=…) as hold:` then
        `await hold.consume(usage)`. A hold not consumed inside the block is released on exit,
        also on errors and cancellation."""
        return Reservation(self, run_id, model, estimate, ttl_seconds, mode)

    def tool_call(self, run_id: str, *, count: int = 1, ttl_seconds: int = 0) -> Reservation:
        """A hold of `count` tool calls; consume it after the tool ran."""
        return Reservation(
            self,
            run_id,
            "",
            budget_pb2.Amounts(tool_calls=count),
            ttl_seconds,
            budget_pb2.RESERVE_MODE_ALL_OR_NOTHING,
        )

    def retry(self, run_id: str, *, ttl_seconds: int = 0) -> Reservation:
        """A hold of one retry, before re-running a failed step."""
        return Reservation(
            self,
            run_id,
            "",
            budget_pb2.Amounts(retries=1),
            ttl_seconds,
            budget_pb2.RESERVE_MODE_ALL_OR_NOTHING,
        )


class Reservation:
    """One reservation around one call: granted amounts in, usage out, never leaked."""

    def __init__(
        self,
        client: BudgetClient,
        run_id: str,
        model: str,
        estimate: budget_pb2.Amounts,
        ttl_seconds: int,
        mode: budget_pb2.ReserveMode,
    ) -> None:
        self._client = client
        self.run_id = run_id
        self.model = model
        self._estimate = estimate
        self._ttl = ttl_seconds
        self._mode = mode
        self.reservation = budget_pb2.Reservation()
        self.settled = False
        self.consumed: budget_pb2.ConsumeResponse | None = None

    @property
    def reservation_id(self) -> str:
        return str(self.reservation.reservation_id)

    @property
    def granted(self) -> budget_pb2.Amounts:
        return self.reservation.granted

    async def __aenter__(self) -> Reservation:
        reply = await self._client.reserve(
            self.run_id,
            model=self.model,
            estimate=self._estimate,
            ttl_seconds=self._ttl,
            mode=self._mode,
        )
        self.reservation = reply.reservation
        return self

    async def consume(self, usage: budget_pb2.Amounts) -> budget_pb2.ConsumeResponse:
        """Records what the provider billed and settles the hold (never refused for budget)."""
        self.consumed = await self._client.consume(
            self.run_id, usage=usage, model=self.model, reservation_id=self.reservation_id
        )
        self.settled = True
        return self.consumed

    async def release(self) -> None:
        if not self.settled:
            await self._client.release(self.run_id, self.reservation_id)
            self.settled = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.settled:
            return
        # Shielded so a cancelled task still releases; if the service is unreachable the hold
        # expires on its own at expires_at.
        release = asyncio.ensure_future(self.release())
        with contextlib.suppress(Unavailable):
            await asyncio.shield(release)


# The name this context manager had in earlier releases (DESIGN 3.9 says "hold"): kept so
# that existing callers keep importing it.
Hold = Reservation
