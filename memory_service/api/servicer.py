"""MemoryService gRPC servicer: converts requests, calls the use cases, converts responses."""

from __future__ import annotations

from typing import TypeAlias

import grpc

from memory_service.api import requests as convert
from memory_service.api import responses as convert_out
from memory_service.api.capabilities import MemoryCapabilities
from memory_service.api.item_messages import MemoryItems
from memory_service.usecases.compaction import MemoryCompaction
from memory_service.usecases.listing import MemoryReads
from memory_service.usecases.queries import MemoryQueries
from memory_service.usecases.writes import MemoryWrites
from ration.memory.v1 import memory_service_pb2 as pb
from ration.memory.v1 import memory_service_pb2_grpc
from servicekit.auth import current_identity

Context: TypeAlias = grpc.aio.ServicerContext


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):
    """Writes return the stored response bytes (also on a replay), decoded here for gRPC."""

    def __init__(
        self,
        capabilities: MemoryCapabilities,
        writes: MemoryWrites,
        compaction: MemoryCompaction,
        queries: MemoryQueries,
        reads: MemoryReads,
        items: MemoryItems,
    ) -> None:
        self._capabilities = capabilities
        self._writes = writes
        self._compaction = compaction
        self._queries = queries
        self._reads = reads
        self._items = items

    async def AppendEntries(
        self, request: pb.AppendEntriesRequest, context: Context
    ) -> pb.AppendEntriesResponse:
        raw = await self._writes.append(
            current_identity(),
            convert.append_command(request),
            convert.envelope("AppendEntries", convert_out.encode_append),
        )
        return pb.AppendEntriesResponse.FromString(raw)

    async def ReviseEntry(
        self, request: pb.ReviseEntryRequest, context: Context
    ) -> pb.ReviseEntryResponse:
        raw = await self._writes.revise(
            current_identity(),
            convert.revise_command(request),
            convert.envelope("ReviseEntry", convert_out.encode_revise),
        )
        return pb.ReviseEntryResponse.FromString(raw)

    async def ForgetEntries(
        self, request: pb.ForgetEntriesRequest, context: Context
    ) -> pb.ForgetEntriesResponse:
        raw = await self._writes.change_states(
            current_identity(),
            convert.states_command(request),
            convert.envelope("ForgetEntries", convert_out.encode_forget),
            active=False,
        )
        return pb.ForgetEntriesResponse.FromString(raw)

    async def ReactivateEntries(
        self, request: pb.ReactivateEntriesRequest, context: Context
    ) -> pb.ReactivateEntriesResponse:
        raw = await self._writes.change_states(
            current_identity(),
            convert.states_command(request),
            convert.envelope("ReactivateEntries", convert_out.encode_reactivate),
            active=True,
        )
        return pb.ReactivateEntriesResponse.FromString(raw)

    async def OrganizeMemory(
        self, request: pb.OrganizeMemoryRequest, context: Context
    ) -> pb.OrganizeMemoryResponse:
        raw = await self._writes.organize(
            current_identity(),
            convert.organize_command(request),
            convert.envelope("OrganizeMemory", convert_out.encode_organize),
        )
        return pb.OrganizeMemoryResponse.FromString(raw)

    async def CompactMemory(
        self, request: pb.CompactMemoryRequest, context: Context
    ) -> pb.CompactMemoryResponse:
        raw = await self._compaction.compact(
            current_identity(),
            convert.compact_command(request),
            convert.envelope("CompactMemory", convert_out.encode_compact),
        )
        return pb.CompactMemoryResponse.FromString(raw)

    async def GetCapacity(
        self, request: pb.GetCapacityRequest, context: Context
    ) -> pb.GetCapacityResponse:
        report = await self._queries.capacity(current_identity(), convert.capacity_query(request))
        return convert_out.capacity_response(report)

    async def ListRevisions(
        self, request: pb.ListRevisionsRequest, context: Context
    ) -> pb.ListRevisionsResponse:
        revisions = await self._queries.revisions(
            current_identity(), convert.revisions_query(request)
        )
        return convert_out.revisions_response(revisions)

    async def ListChanges(
        self, request: pb.ListChangesRequest, context: Context
    ) -> pb.ListChangesResponse:
        page = await self._queries.changes(current_identity(), convert.changes_query(request))
        return convert_out.changes_response(page)

    async def GetChanges(
        self, request: pb.GetChangesRequest, context: Context
    ) -> pb.GetChangesResponse:
        page = await self._queries.changes(current_identity(), convert.changes_query(request))
        return convert_out.deprecated_changes_response(page)

    async def GetEntryVersion(
        self, request: pb.GetEntryVersionRequest, context: Context
    ) -> pb.GetEntryVersionResponse:
        version = await self._queries.entry_version(
            current_identity(), convert.entry_version_query(request)
        )
        return convert_out.entry_version_response(version)

    async def ValidateCitation(
        self, request: pb.ValidateCitationRequest, context: Context
    ) -> pb.ValidateCitationResponse:
        state = await self._queries.validate_citation(
            current_identity(), convert.citation_query(request)
        )
        return convert_out.citation_response(state)

    async def ListMemory(
        self, request: pb.ListMemoryRequest, context: Context
    ) -> pb.ListMemoryResponse:
        query = convert.list_query(request)
        # The caller's credentials travel on only for the run_id clamp.
        forwarded = convert.authorization(context.invocation_metadata()) if query.run_id else None
        result = await self._reads.list_memory(current_identity(), query, forwarded)
        return convert_out.list_response(result, self._items)

    async def SearchMemory(
        self, request: pb.SearchMemoryRequest, context: Context
    ) -> pb.SearchMemoryResponse:
        result = await self._reads.search(current_identity(), convert.search_query(request))
        return convert_out.search_response(result, self._items)

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: Context
    ) -> pb.GetCapabilitiesResponse:
        return convert_out.capabilities_response(self._capabilities)
