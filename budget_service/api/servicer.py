"""BudgetService gRPC servicer: converts requests, calls the use cases, converts responses."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc

from budget_service.api import requests as convert
from budget_service.api import responses as out
from budget_service.api import stored_responses as stored
from budget_service.api.api_keys import ApiKeysServicer
from budget_service.api.capabilities import BudgetCapabilities
from budget_service.usecases.api_keys import ApiKeys
from budget_service.usecases.reports import SpendReports
from budget_service.usecases.reservations import Reservations
from budget_service.usecases.runs import BudgetService
from budget_service.usecases.tenant_events import TenantStreams
from ration.budget.v1 import budget_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc
from servicekit.auth import current_identity


class BudgetServicer(ApiKeysServicer, budget_service_pb2_grpc.BudgetServiceServicer):
    def __init__(
        self,
        capabilities: BudgetCapabilities,
        service: BudgetService,
        reservations: Reservations,
        max_ttl_seconds: int,
        reports: SpendReports,
        tenant_streams: TenantStreams,
        keys: ApiKeys,
    ) -> None:
        self._keys = keys
        self._capabilities = capabilities
        self._service = service
        self._reservations = reservations
        self._max_ttl_seconds = max_ttl_seconds
        self._reports = reports
        self._tenant_streams = tenant_streams

    async def OpenRun(
        self, request: pb.OpenRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.OpenRunResponse:
        identity = current_identity()
        tenant = identity.tenant
        mutation, command = convert.open_run(request, identity.key_id)
        data = await self._service.open_run(tenant, mutation, command, out.open_run_reply)
        return pb.OpenRunResponse.FromString(data)

    async def GetRun(
        self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRunResponse:
        tenant = current_identity().tenant
        view = await self._service.get_run(tenant, convert.run_id(request))
        return pb.GetRunResponse(run=out.run(view))

    async def CloseRun(
        self, request: pb.CloseRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseRunResponse:
        tenant = current_identity().tenant
        mutation, command = convert.close_run(request)
        data = await self._service.close_run(tenant, mutation, command, out.close_run_reply)
        return pb.CloseRunResponse.FromString(data)

    async def ResumeRun(
        self, request: pb.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeRunResponse:
        # An approval (the approver role, see api/roles.py), recorded by principal.
        approver = current_identity()
        mutation, command = convert.resume_run(request, approver.principal)
        data = await self._service.resume_run(
            approver.tenant, mutation, command, out.resume_run_reply
        )
        return pb.ResumeRunResponse.FromString(data)

    async def Reserve(
        self, request: pb.ReserveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReserveResponse:
        tenant = current_identity().tenant
        mutation, command = convert.reserve(request, self._max_ttl_seconds)
        return stored.reserve(await self._reservations.reserve(tenant, mutation, command))

    async def Consume(
        self, request: pb.ConsumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumeResponse:
        tenant = current_identity().tenant
        mutation, command = convert.consume(request)
        return stored.consume(await self._reservations.consume(tenant, mutation, command))

    async def Release(
        self, request: pb.ReleaseRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseResponse:
        tenant = current_identity().tenant
        mutation, command = convert.release(request)
        return stored.release(await self._reservations.release(tenant, mutation, command))

    async def Check(
        self, request: pb.CheckRequest, context: grpc.aio.ServicerContext
    ) -> pb.CheckResponse:
        tenant = current_identity().tenant
        result = await self._reservations.check(tenant, convert.check(request))
        return out.check(result)

    async def ListRunEvents(
        self, request: pb.ListRunEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunEventsResponse:
        tenant = current_identity().tenant
        run_id, after_seq, page_size = convert.list_events(request)
        page = await self._service.list_events(tenant, run_id, after_seq, page_size)
        return out.list_run_events(run_id, page)

    async def WatchRunEvents(
        self, request: pb.WatchRunEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchRunEventsResponse]:
        tenant = current_identity().tenant
        run_id, after_seq = convert.watch(request)
        # Closed at once when the stream ends or is cancelled: that frees its stream slot.
        async with contextlib.aclosing(self._service.watch(tenant, run_id, after_seq)) as events:
            async for run, event in events:
                yield pb.WatchRunEventsResponse(event=out.run_event(run, event))

    async def WatchTenantEvents(
        self, request: pb.WatchTenantEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchTenantEventsResponse]:
        tenant = current_identity().tenant
        after, wanted = convert.watch_tenant(request)
        # Closed at once when the stream ends or is cancelled: that frees its stream slot.
        items = self._tenant_streams.watch(tenant, after, wanted)
        async with contextlib.aclosing(items) as stream:
            async for item in stream:
                yield out.tenant_item(item)

    async def PutScopeBudget(
        self, request: pb.PutScopeBudgetRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutScopeBudgetResponse:
        tenant = current_identity().tenant
        mutation, budget = convert.scope_budget(request)
        data = await self._service.put_scope_budget(
            tenant, mutation, budget, out.put_scope_budget_reply
        )
        return pb.PutScopeBudgetResponse.FromString(data)

    async def GetScopeBudget(
        self, request: pb.GetScopeBudgetRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetScopeBudgetResponse:
        tenant = current_identity().tenant
        _, key = convert.scope_key(request, mutating=False)
        return out.get_scope_budget(await self._service.get_scope_budget(tenant, key))

    async def DeleteScopeBudget(
        self, request: pb.DeleteScopeBudgetRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteScopeBudgetResponse:
        tenant = current_identity().tenant
        mutation, key = convert.scope_key(request, mutating=True)
        assert mutation is not None
        data = await self._service.delete_scope_budget(
            tenant, mutation, key, out.delete_scope_budget_reply
        )
        return pb.DeleteScopeBudgetResponse.FromString(data)

    async def ListScopeBudgets(
        self, request: pb.ListScopeBudgetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListScopeBudgetsResponse:
        tenant = current_identity().tenant
        query, after, page_size = convert.list_scope_budgets(request)
        page = await self._service.list_scope_budgets(tenant, query, after, page_size)
        return out.list_scope_budgets(query, page)

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCapabilitiesResponse:
        return out.capabilities(self._capabilities)

    async def ReportSpend(
        self, request: pb.ReportSpendRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportSpendResponse:
        tenant = current_identity().tenant
        query, after_key, page_size = convert.report_spend(request)
        page = await self._reports.report(tenant, query, after_key, page_size)
        return out.report_spend(query, page)
