"""BudgetClient: the budget service for orchestrators, with a hold helper around each call.

Every method returns the typed views of `ration_client.views` (Decimal USD for cost, None for
unbounded limits, enum members), never protobuf messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import grpc

from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc
from ration_client import convert
from ration_client._rpc import Client, new_request_id
from ration_client.degraded import FailOpen, JournalEntry
from ration_client.errors import RationError, TooManyReports, Unavailable, decode
from ration_client.holds import Prices, Reservation, WorstCase, journaled_result
from ration_client.keys import ApiKeysMixin
from ration_client.views import (
    NANOS_PER_USD,
    Amounts,
    Capabilities,
    CheckResult,
    CloseResult,
    ConsumeResult,
    Dimension,
    Enforcement,
    Policy,
    ReservationInfo,
    ReserveMode,
    ReserveResult,
    Run,
    RunEvent,
    RunEventType,
    RunOutcome,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    ScopeBudgetPage,
    SpendGroupBy,
    SpendPage,
    SpendRow,
    TenantEvent,
    Window,
    usd,
)

__all__ = ["NANOS_PER_USD", "BudgetClient", "usd"]

# Inputs: the client's views or the protobuf messages (accepted as before).
AmountsInput = Amounts | budget_pb2.Amounts
PolicyInput = Policy | budget_pb2.BudgetPolicy

# report_spend_all waits out a refused page this many times in a row, this long at most each.
REPORT_WAITS = 20
MAX_REPORT_WAIT_SECONDS = 10.0


class BudgetClient(ApiKeysMixin, Client):
    """Async client; address and token default to RATION_BUDGET_ADDRESS and RATION_TOKEN.

    `on_unavailable="fail_closed"` (default): holds fail when the service is unreachable.
    `"fail_open"` with `fail_open=FailOpen(journal_path, per_run=…, per_process=…)`: they are
    granted within that local allowance and their consumes journaled and replayed
    (`ration_client.degraded`)."""

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
        on_unavailable: str = "fail_closed",
        fail_open: FailOpen | None = None,
    ) -> None:
        if on_unavailable not in ("fail_closed", "fail_open"):
            raise ValueError("on_unavailable is 'fail_closed' or 'fail_open'")
        if (on_unavailable == "fail_open") != (fail_open is not None):
            raise ValueError("on_unavailable='fail_open' goes with fail_open=FailOpen(...)")
        super().__init__(
            address, token=token, timeout=timeout, interceptors=interceptors, attempts=attempts
        )
        self._stub = budget_service_pb2_grpc.BudgetServiceStub(self._rpc.channel)  # type: ignore[no-untyped-call]
        self.degraded = fail_open
        self._replaying = asyncio.Lock()

    # ---- runs ------------------------------------------------------------------------------

    async def open_run(
        self,
        run_id: str,
        *,
        project_id: str,
        workflow_id: str = "",
        agent_id: str = "",
        policy: PolicyInput | None = None,
        request_id: str | None = None,
        end_user_id: str = "",
        tags: Mapping[str, str] | None = None,
    ) -> Run:
        """`end_user_id`: the run draws on that end-user's pools; `tags`: report keys."""
        request = budget_pb2.OpenRunRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            project_id=project_id,
            workflow_id=workflow_id,
            agent_id=agent_id,
            policy=convert.policy_message(policy),
            end_user_id=end_user_id,
            tags=dict(tags or {}),
        )
        return convert.run((await self._rpc.unary(self._stub.OpenRun, request)).run)

    async def get_run(self, run_id: str) -> Run:
        request = budget_pb2.GetRunRequest(run_id=run_id)
        return convert.run((await self._rpc.unary(self._stub.GetRun, request)).run)

    async def close_run(
        self,
        run_id: str,
        outcome: RunOutcome = RunOutcome.SUCCEEDED,
        *,
        request_id: str | None = None,
    ) -> CloseResult:
        request = budget_pb2.CloseRunRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            outcome=convert.OUTCOMES.number(outcome),
        )
        return convert.close_result(await self._rpc.unary(self._stub.CloseRun, request))

    async def resume_run(
        self,
        run_id: str,
        *,
        delta: AmountsInput,
        approver: str,
        request_id: str | None = None,
    ) -> Run:
        """Approves an INTERRUPTED run (admin or approver token). The server records the
        token's principal as the approver; `approver` is only a note (no secrets)."""
        request = budget_pb2.ResumeRunRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            delta=convert.amounts_message(delta),
            approver=approver,
        )
        return convert.run((await self._rpc.unary(self._stub.ResumeRun, request)).run)

    # ---- the per-call protocol -------------------------------------------------------------

    async def reserve(
        self,
        run_id: str,
        *,
        model: str,
        estimate: AmountsInput,
        ttl_seconds: int = 0,
        mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
        request_id: str | None = None,
    ) -> ReserveResult:
        request = budget_pb2.ReserveRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            model=model,
            estimate=convert.amounts_message(estimate),
            ttl_seconds=ttl_seconds,
            mode=convert.MODES.number(mode),
        )
        return convert.reserve_result(await self._rpc.unary(self._stub.Reserve, request))

    async def consume(
        self,
        run_id: str,
        *,
        usage: AmountsInput,
        model: str = "",
        reservation_id: str = "",
        request_id: str | None = None,
    ) -> ConsumeResult:
        request = budget_pb2.ConsumeRequest(
            request_id=request_id or new_request_id(),
            run_id=run_id,
            reservation_id=reservation_id,
            model=model,
            usage=convert.amounts_message(usage),
        )
        return convert.consume_result(await self._rpc.unary(self._stub.Consume, request))

    async def send_journaled(self, entry: JournalEntry) -> ConsumeResult:
        """Sends one journaled consume with its own request id; journaled_result() when the
        service is still unreachable (it stays in the journal)."""
        assert self.degraded is not None
        try:
            result = await self.consume(
                entry.run_id,
                usage=entry.usage,
                model=entry.model,
                reservation_id=entry.reservation_id,
                request_id=entry.request_id,
            )
        except Unavailable:
            return journaled_result()
        except RationError as error:
            self.degraded.settled(entry, failed=error.reason or str(error))
            raise
        self.degraded.settled(entry)
        return result

    async def replay_journal(self) -> int:
        """Replays the fail-open journal in order, each consume with its request id (the
        service applies each once); stops at the first UNAVAILABLE. A consume the service
        rejects is marked failed, counted and logged. Returns how many were recorded."""
        if self.degraded is None:
            return 0
        replayed = 0
        async with self._replaying:
            for entry in self.degraded.pending():
                try:
                    result = await self.send_journaled(entry)
                except RationError:
                    continue
                if result.journaled:
                    break
                replayed += 1
        return replayed

    async def release(
        self, run_id: str, reservation_id: str, *, request_id: str | None = None
    ) -> ReservationInfo:
        request = budget_pb2.ReleaseRequest(
            request_id=request_id or new_request_id(), run_id=run_id, reservation_id=reservation_id
        )
        reply = await self._rpc.unary(self._stub.Release, request)
        return convert.reservation(reply.reservation)

    async def check(
        self,
        run_id: str,
        *,
        estimate: AmountsInput | None = None,
        model: str = "",
        authorization: str | None = None,
    ) -> CheckResult:
        """The run's balances; `authorization` forwards a caller's own header instead of this
        client's token (the memory service's ListMemory clamp checks in its caller's tenant)."""
        request = budget_pb2.CheckRequest(
            run_id=run_id, estimate=convert.amounts_message(estimate), model=model
        )
        reply = await self._rpc.unary(self._stub.Check, request, authorization=authorization)
        return convert.check_result(reply)

    async def remaining_tokens(
        self, run_id: str, *, authorization: str | None = None
    ) -> int | None:
        """The run's remaining tokens, the tightest of its limits and pools (Check); None when
        no limit bounds its tokens."""
        reply = await self.check(run_id, authorization=authorization)
        remaining = [
            int(d.remaining)
            for d in reply.dimensions
            if d.dimension is Dimension.TOKENS and d.remaining is not None
        ]
        return min(remaining) if remaining else None

    def call(
        self,
        run_id: str,
        *,
        model: str,
        estimate: AmountsInput | None = None,
        prompt_tokens: int = 0,
        max_output_tokens: int | None = None,
        prices: Prices | None = None,
        ttl_seconds: int = 0,
        mode: ReserveMode = ReserveMode.ALL_OR_NOTHING,
    ) -> Reservation:
        """`async with budget.call(run_id, model=…, estimate=…) as hold:` then
        `await hold.consume(usage)`. A hold not consumed inside the block is released on exit,
        also on errors and cancellation.

        Or reserve the worst case instead of an estimate: `prompt_tokens` + `max_output_tokens`
        tokens and, with `prices`, what they cost at most; then `hold.max_tokens` is the
        max_tokens to give the model so that the call fits the grant (under ReserveMode.UP_TO
        it may be less than max_output_tokens, 0 when not even the prompt fits). A call made
        with at most that many output tokens cannot overrun its hold."""
        worst_case = None
        if max_output_tokens is not None:
            if estimate is not None:
                raise ValueError("pass either estimate or max_output_tokens, not both")
            worst_case = WorstCase(prompt_tokens, max_output_tokens, prices)
            estimate = worst_case.estimate
        elif estimate is None:
            raise ValueError("pass an estimate, or max_output_tokens (and prompt_tokens, prices)")
        elif prices is not None or prompt_tokens:
            raise ValueError("prompt_tokens and prices go with max_output_tokens")
        return Reservation(
            self, run_id, model, _amounts(estimate), ttl_seconds, mode, worst_case=worst_case
        )

    def tool_call(self, run_id: str, *, count: int = 1, ttl_seconds: int = 0) -> Reservation:
        """A hold of `count` tool calls; consume it after the tool ran."""
        estimate = Amounts(tool_calls=count)
        return Reservation(self, run_id, "", estimate, ttl_seconds, ReserveMode.ALL_OR_NOTHING)

    def retry(self, run_id: str, *, ttl_seconds: int = 0) -> Reservation:
        """A hold of one retry, before re-running a failed step."""
        estimate = Amounts(retries=1)
        return Reservation(self, run_id, "", estimate, ttl_seconds, ReserveMode.ALL_OR_NOTHING)

    # ---- events ----------------------------------------------------------------------------

    async def list_events(self, run_id: str, after_seq: int = 0) -> list[RunEvent]:
        """Every event after `after_seq`, following pages."""
        events: list[RunEvent] = []
        token = ""
        while True:
            request = budget_pb2.ListRunEventsRequest(
                run_id=run_id, after_seq=after_seq, page_size=500, page_token=token
            )
            reply = await self._rpc.unary(self._stub.ListRunEvents, request)
            events.extend(convert.run_event(e) for e in reply.events)
            token = reply.next_page_token
            if not token:
                return events

    async def watch(
        self, run_id: str, after_seq: int = 0, *, max_reconnects: int = 20
    ) -> AsyncIterator[RunEvent]:
        """Follows WatchRunEvents, resuming after the last seq seen when the stream drops."""
        last, reconnects = after_seq, 0
        while True:
            request = budget_pb2.WatchRunEventsRequest(run_id=run_id, after_seq=last)
            stream = self._stub.WatchRunEvents(request, metadata=self._rpc.metadata)
            try:
                async for reply in stream:
                    reconnects = 0
                    last = reply.event.seq
                    yield convert.run_event(reply.event)
                return
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or reconnects >= max_reconnects:
                    raise decode(error) from None
                reconnects += 1
                await asyncio.sleep(min(0.05 * 2**reconnects, 2.0))
            finally:
                stream.cancel()

    async def watch_tenant(
        self,
        after_cursor: str = "",
        *,
        event_types: Sequence[RunEventType] = (),
        run_ids: Sequence[str] = (),
        project_ids: Sequence[str] = (),
        start_at_latest: bool = False,
        max_reconnects: int = 20,
    ) -> AsyncGenerator[TenantEvent, None]:
        """Follows WatchTenantEvents (a reader token): every event of the tenant's runs that
        matches the filter, in the tenant's order, and checkpoints (`event` None). When the
        stream drops it resumes after the last cursor seen, so nothing is missed or repeated;
        store `cursor` to resume later, in this process or another."""
        wanted = budget_pb2.TenantEventFilter(
            event_types=[convert.EVENT_TYPES.number(t) for t in event_types],
            run_ids=list(run_ids),
            project_ids=list(project_ids),
        )
        cursor, reconnects = after_cursor, 0
        while True:
            request = budget_pb2.WatchTenantEventsRequest(
                after_cursor=cursor, filter=wanted, start_at_latest=start_at_latest and not cursor
            )
            stream = self._stub.WatchTenantEvents(request, metadata=self._rpc.metadata)
            try:
                async for reply in stream:
                    reconnects = 0
                    cursor = reply.cursor
                    yield convert.tenant_event(reply)
                return
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or reconnects >= max_reconnects:
                    raise decode(error) from None
                reconnects += 1
                await asyncio.sleep(min(0.05 * 2**reconnects, 2.0))
            finally:
                stream.cancel()

    # ---- scope budgets (admin) -------------------------------------------------------------

    async def put_scope_budget(
        self,
        scope: Scope,
        scope_id: str,
        kind: ScopeBudgetKind,
        *,
        policy: PolicyInput | None = None,
        window: Window = Window.NONE,
        enforcement: Enforcement = Enforcement.HARD,
        model_match: str = "",
        max_model_calls: int | None = None,
        request_id: str | None = None,
    ) -> ScopeBudget:
        """Creates or replaces the budget of a project, workflow or agent (admin token).
        `max_model_calls` (pooled only): model calls per window, each Reserve naming a model
        being one."""
        budget = budget_pb2.ScopeBudget(
            scope=convert.SCOPES.number(scope),
            scope_id=scope_id,
            kind=convert.KINDS.number(kind),
            policy=convert.policy_message(policy),
            window=convert.WINDOWS.number(window),
            enforcement=convert.ENFORCEMENTS.number(enforcement),
            model_match=model_match,
            max_model_calls=max_model_calls,
        )
        request = budget_pb2.PutScopeBudgetRequest(
            request_id=request_id or new_request_id(), budget=budget
        )
        reply = await self._rpc.unary(self._stub.PutScopeBudget, request)
        return convert.scope_budget(reply.budget)

    async def get_scope_budget(
        self, scope: Scope, scope_id: str, kind: ScopeBudgetKind
    ) -> ScopeBudget:
        """The budget as stored, and for a pool its current window's `balance` (admin)."""
        request = budget_pb2.GetScopeBudgetRequest(
            scope=convert.SCOPES.number(scope), scope_id=scope_id, kind=convert.KINDS.number(kind)
        )
        return convert.get_scope_budget(await self._rpc.unary(self._stub.GetScopeBudget, request))

    async def delete_scope_budget(
        self,
        scope: Scope,
        scope_id: str,
        kind: ScopeBudgetKind,
        *,
        request_id: str | None = None,
    ) -> None:
        """Deletes a scope budget (an absent one too); opened runs keep what they resolved."""
        request = budget_pb2.DeleteScopeBudgetRequest(
            request_id=request_id or new_request_id(),
            scope=convert.SCOPES.number(scope),
            scope_id=scope_id,
            kind=convert.KINDS.number(kind),
        )
        await self._rpc.unary(self._stub.DeleteScopeBudget, request)

    async def list_scope_budgets(
        self,
        *,
        scope: Scope | None = None,
        kind: ScopeBudgetKind | None = None,
        window: Window | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> ScopeBudgetPage:
        """One page of the tenant's scope budgets (admin), by (scope, scope_id, kind), only
        those of `scope`, `kind` and `window` when given; without balances. Pass
        `next_page_token` back for the next page."""
        request = budget_pb2.ListScopeBudgetsRequest(page_size=page_size, page_token=page_token)
        if scope is not None:  # unset: every scope (and kind, and window)
            request.scope = convert.SCOPES.number(scope)
        if kind is not None:
            request.kind = convert.KINDS.number(kind)
        if window is not None:
            request.window = convert.WINDOWS.number(window)
        reply = await self._rpc.unary(self._stub.ListScopeBudgets, request)
        return convert.scope_budget_page(reply)

    async def list_scope_budgets_all(
        self,
        *,
        scope: Scope | None = None,
        kind: ScopeBudgetKind | None = None,
        window: Window | None = None,
        page_size: int = 0,
    ) -> list[ScopeBudget]:
        """Every scope budget matching the filter, following pages."""
        budgets: list[ScopeBudget] = []
        token = ""
        while True:
            page = await self.list_scope_budgets(
                scope=scope, kind=kind, window=window, page_size=page_size, page_token=token
            )
            budgets.extend(page.budgets)
            token = page.next_page_token
            if not token:
                return budgets

    # ---- capabilities and reports ----------------------------------------------------------

    async def capabilities(self) -> Capabilities:
        request = budget_pb2.GetCapabilitiesRequest()
        return convert.capabilities(await self._rpc.unary(self._stub.GetCapabilities, request))

    async def report_spend(
        self,
        start: datetime,
        end: datetime,
        group_by: SpendGroupBy,
        *,
        project_id: str = "",
        workflow_id: str = "",
        agent_id: str = "",
        model: str = "",
        page_size: int = 0,
        page_token: str = "",
        end_user_id: str = "",
        api_key_id: str = "",
        tag_key: str = "",
    ) -> SpendPage:
        """One page of the tenant's recorded spend in [start, end) (aware datetimes, at most
        366 days), grouped by `group_by`, optionally filtered by exact owner or model ids.
        Exact sums of the ledger; pass `next_page_token` back for the next page."""
        request = budget_pb2.ReportSpendRequest(
            start_time=convert.timestamp_of(start),
            end_time=convert.timestamp_of(end),
            group_by=convert.SPEND_GROUPS.number(group_by),
            filter=budget_pb2.SpendFilter(
                project_id=project_id,
                workflow_id=workflow_id,
                agent_id=agent_id,
                model=model,
                end_user_id=end_user_id,
                api_key_id=api_key_id,
            ),
            page_size=page_size,
            page_token=page_token,
            group_by_tag_key=tag_key,
        )
        return convert.spend_page(await self._rpc.unary(self._stub.ReportSpend, request))

    async def report_spend_all(
        self,
        start: datetime,
        end: datetime,
        group_by: SpendGroupBy,
        *,
        project_id: str = "",
        workflow_id: str = "",
        agent_id: str = "",
        model: str = "",
        page_size: int = 0,
        end_user_id: str = "",
        api_key_id: str = "",
        tag_key: str = "",
    ) -> list[SpendRow]:
        """Every row of the report, following pages. A page refused TOO_MANY_REPORTS (the
        tenant's reports at their share of the server) is asked again after the RetryInfo
        delay, at most REPORT_WAITS times in a row."""
        rows: list[SpendRow] = []
        token = ""
        waits = 0
        while True:
            try:
                page = await self.report_spend(
                    start,
                    end,
                    group_by,
                    project_id=project_id,
                    workflow_id=workflow_id,
                    agent_id=agent_id,
                    model=model,
                    page_size=page_size,
                    page_token=token,
                    end_user_id=end_user_id,
                    api_key_id=api_key_id,
                    tag_key=tag_key,
                )
            except TooManyReports as refused:
                waits += 1
                if waits > REPORT_WAITS:
                    raise
                await asyncio.sleep(min(refused.retry_after_seconds, MAX_REPORT_WAIT_SECONDS))
                continue
            waits = 0
            rows.extend(page.rows)
            token = page.next_page_token
            if not token:
                return rows


def _amounts(value: AmountsInput) -> Amounts:
    return value if isinstance(value, Amounts) else convert.amounts(value)
