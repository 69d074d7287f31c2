"""BudgetService gRPC servicer: converts requests, calls the use cases, converts responses."""

from __future__ import annotations

import grpc

from budget_service.capabilities import BudgetCapabilities
from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc


class BudgetServicer(budget_service_pb2_grpc.BudgetServiceServicer):
    def __init__(self, capabilities: BudgetCapabilities) -> None:
        self._capabilities = capabilities

    async def GetCapabilities(
        self, request: budget_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> budget_pb2.GetCapabilitiesResponse:
        caps = self._capabilities
        limits = budget_pb2.BudgetLimits()
        if caps.max_budget_tokens is not None:
            limits.max_budget_tokens = caps.max_budget_tokens
        if caps.max_budget_cost_nanos is not None:
            limits.max_budget_cost_nanos = caps.max_budget_cost_nanos
        return budget_pb2.GetCapabilitiesResponse(
            budget=budget_pb2.BudgetCapability(
                supported=True,
                dimensions=list(caps.dimensions),
                enforce=caps.enforce,
                scopes=list(caps.scopes),
            ),
            limits=limits,
            capabilities_json=caps.to_json(),
        )
