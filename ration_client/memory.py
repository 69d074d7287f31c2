"""MemoryClient: budgeted reads of agent memory and redacted, revisioned writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ration.memory.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc
from ration_client._rpc import Client, new_request_id

EntryInput = memory_pb2.EntryInput


def _entry(entry: str | memory_pb2.EntryInput | Mapping[str, Any]) -> memory_pb2.EntryInput:
    if isinstance(entry, memory_pb2.EntryInput):
        return entry
    if isinstance(entry, str):
        return memory_pb2.EntryInput(content=entry)
    return memory_pb2.EntryInput(**entry)


def _secrets(secrets: Mapping[str, str] | None) -> list[memory_pb2.Secret]:
    return [memory_pb2.Secret(secret_id=k, value=v) for k, v in (secrets or {}).items()]


class MemoryClient(Client):
    """Async client; address and token default to RATION_MEMORY_ADDRESS and RATION_TOKEN."""

    ADDRESS_VARIABLE = "RATION_MEMORY_ADDRESS"
    DEFAULT_ADDRESS = "127.0.0.1:50052"

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 5.0,
        interceptors: list[Any] | None = None,
    ) -> None:
        super().__init__(address, token=token, timeout=timeout, interceptors=interceptors)
        self._stub = memory_service_pb2_grpc.MemoryServiceStub(self._rpc.channel)  # type: ignore[no-untyped-call]

    async def append(
        self,
        memory_ref: str,
        entries: Iterable[str | memory_pb2.EntryInput | Mapping[str, Any]],
        *,
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> memory_service_pb2.AppendEntriesResponse:
        """Appends entries in one revision; `secrets` ({id: value}) are redacted before storage."""
        request = memory_service_pb2.AppendEntriesRequest(
            request_id=request_id or new_request_id(),
            memory_ref=memory_ref,
            entries=[_entry(e) for e in entries],
            secrets=_secrets(secrets),
        )
        if expected_revision is not None:
            request.expected_revision = expected_revision
        return await self._rpc.unary(self._stub.AppendEntries, request)

    async def forget(
        self,
        memory_ref: str,
        entry_ids: Iterable[str],
        *,
        reason: str = "",
        secrets: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> memory_service_pb2.ForgetEntriesResponse:
        """Deactivates entries; `secrets` ({id: value}) are redacted from the reason."""
        request = memory_service_pb2.ForgetEntriesRequest(
            request_id=request_id or new_request_id(),
            memory_ref=memory_ref,
            entry_ids=list(entry_ids),
            reason=reason,
            secrets=_secrets(secrets),
        )
        return await self._rpc.unary(self._stub.ForgetEntries, request)

    async def list(
        self,
        memory_ref: str,
        *,
        token_budget: int = 0,
        token_counter: memory_pb2.TokenCounter = memory_pb2.TOKEN_COUNTER_UNSPECIFIED,
        rank: memory_pb2.Rank = memory_pb2.RANK_RECENCY,
        query: str = "",
        limit: int = 0,
        tag: str = "",
        revision: int | None = None,
        run_id: str = "",
    ) -> memory_service_pb2.ListMemoryResponse:
        """The ranked prefix of memory that fits `token_budget` (whole entries only)."""
        request = memory_service_pb2.ListMemoryRequest(
            memory_ref=memory_ref,
            token_budget=token_budget,
            token_counter=token_counter,
            rank=rank,
            query=query,
            limit=limit,
            tag=tag,
            run_id=run_id,
        )
        if revision is not None:
            request.revision = revision
        return await self._rpc.unary(self._stub.ListMemory, request)

    async def capacity(self, memory_ref: str, revision: int | None = None) -> memory_pb2.Capacity:
        request = memory_service_pb2.GetCapacityRequest(memory_ref=memory_ref)
        if revision is not None:
            request.revision = revision
        return (await self._rpc.unary(self._stub.GetCapacity, request)).capacity

    async def search(
        self,
        memory_ref: str,
        query: str,
        *,
        mode: memory_pb2.SearchMode = memory_pb2.SEARCH_MODE_SEMANTIC,
        limit: int = 10,
    ) -> memory_service_pb2.SearchMemoryResponse:
        request = memory_service_pb2.SearchMemoryRequest(
            memory_ref=memory_ref, query=query, mode=mode, limit=limit
        )
        return await self._rpc.unary(self._stub.SearchMemory, request)
