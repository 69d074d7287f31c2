"""MemoryService gRPC servicer: converts requests, calls the use cases, converts responses."""

from __future__ import annotations

import grpc

from memory_service.capabilities import MemoryCapabilities
from ration.memory.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):
    def __init__(self, capabilities: MemoryCapabilities) -> None:
        self._capabilities = capabilities

    async def GetCapabilities(
        self, request: memory_service_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> memory_service_pb2.GetCapabilitiesResponse:
        caps = self._capabilities
        return memory_service_pb2.GetCapabilitiesResponse(
            supported=True,
            max_entry_size_bytes=caps.max_entry_size_bytes,
            ttl_supported=True,
            search=memory_service_pb2.SearchCapability(
                supported=bool(caps.search_modes), modes=list(caps.search_modes)
            ),
            injection_budget=memory_service_pb2.InjectionBudgetCapability(
                supported=caps.injection_budget,
                token_counter=caps.token_counter if caps.injection_budget else "",
            ),
            capacity_budget=memory_pb2.CapacityBudget(
                max_active_entries=caps.max_active_entries,
                max_manifest_entries=caps.max_manifest_entries,
                max_manifest_bytes=caps.max_manifest_bytes,
            ),
            compaction=memory_service_pb2.CompactionPolicy(
                enabled=caps.compaction_enabled,
                min_tombstone_revisions=caps.min_tombstone_revisions,
            ),
            max_history_revisions=caps.max_history_revisions,
            capabilities_json=caps.to_json(),
        )
