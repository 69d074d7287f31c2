"""The memory tests' terse client over the stub, request builders and store probes."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import grpc

from ration.memory.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

pb = memory_service_pb2
MEMORY_TABLES = (
    "memories",
    "revisions",
    "changes",
    "entry_versions",
    "manifest_items",
    "request_log",
)


def request_id() -> str:
    return uuid.uuid4().hex


def _secrets(secrets: dict[str, str] | None) -> list[memory_pb2.Secret]:
    return [memory_pb2.Secret(secret_id=k, value=v) for k, v in (secrets or {}).items()]


def entry(content: str, **fields: Any) -> memory_pb2.EntryInput:
    return memory_pb2.EntryInput(content=content, **fields)


class Memory:
    """One memory_ref through a real MemoryService stub; every write gets a fresh request_id."""

    def __init__(self, channel: grpc.aio.Channel, ref: str, token: str | None = None) -> None:
        self.stub = memory_service_pb2_grpc.MemoryServiceStub(channel)  # type: ignore[no-untyped-call]
        self.ref = ref
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None

    def _kw(self) -> dict[str, Any]:
        return {"metadata": self.metadata} if self.metadata else {}

    def _expected(self, request: Any, expected_revision: int | None) -> Any:
        if expected_revision is not None:
            request.expected_revision = expected_revision
        return request

    async def append(
        self,
        *entries: str | memory_pb2.EntryInput,
        expected_revision: int | None = None,
        secrets: dict[str, str] | None = None,
        rid: str | None = None,
    ) -> memory_service_pb2.AppendEntriesResponse:
        request = pb.AppendEntriesRequest(
            request_id=rid or request_id(),
            memory_ref=self.ref,
            entries=[e if isinstance(e, memory_pb2.EntryInput) else entry(e) for e in entries],
            secrets=[memory_pb2.Secret(secret_id=k, value=v) for k, v in (secrets or {}).items()],
        )
        return await self.stub.AppendEntries(
            self._expected(request, expected_revision), **self._kw()
        )

    async def revise(
        self,
        entry_id: str,
        content: str | memory_pb2.EntryInput,
        *,
        reason: str = "",
        expected_revision: int | None = None,
        secrets: dict[str, str] | None = None,
    ) -> memory_service_pb2.ReviseEntryResponse:
        request = pb.ReviseEntryRequest(
            request_id=request_id(),
            memory_ref=self.ref,
            entry_id=entry_id,
            entry=content if isinstance(content, memory_pb2.EntryInput) else entry(content),
            reason=reason,
            secrets=[memory_pb2.Secret(secret_id=k, value=v) for k, v in (secrets or {}).items()],
        )
        return await self.stub.ReviseEntry(self._expected(request, expected_revision), **self._kw())

    async def forget(
        self,
        *entry_ids: str,
        reason: str = "",
        expected_revision: int | None = None,
        secrets: dict[str, str] | None = None,
    ) -> memory_service_pb2.ForgetEntriesResponse:
        request = pb.ForgetEntriesRequest(
            request_id=request_id(),
            memory_ref=self.ref,
            entry_ids=entry_ids,
            reason=reason,
            secrets=_secrets(secrets),
        )
        return await self.stub.ForgetEntries(
            self._expected(request, expected_revision), **self._kw()
        )

    async def reactivate(
        self,
        *entry_ids: str,
        reason: str = "",
        expected_revision: int | None = None,
        secrets: dict[str, str] | None = None,
    ) -> memory_service_pb2.ReactivateEntriesResponse:
        request = pb.ReactivateEntriesRequest(
            request_id=request_id(),
            memory_ref=self.ref,
            entry_ids=entry_ids,
            reason=reason,
            secrets=_secrets(secrets),
        )
        return await self.stub.ReactivateEntries(
            self._expected(request, expected_revision), **self._kw()
        )

    async def dedupe(self) -> memory_service_pb2.OrganizeMemoryResponse:
        request = pb.OrganizeMemoryRequest(
            request_id=request_id(), memory_ref=self.ref, mode=memory_pb2.ORGANIZE_MODE_DEDUPE
        )
        return await self.stub.OrganizeMemory(request, **self._kw())

    async def compact(
        self,
        *,
        dry_run: bool = False,
        limit: int = 0,
        reason: str = "",
        expected_revision: int | None = None,
        secrets: dict[str, str] | None = None,
    ) -> memory_service_pb2.CompactMemoryResponse:
        request = pb.CompactMemoryRequest(
            request_id=request_id(),
            memory_ref=self.ref,
            dry_run=dry_run,
            limit=limit,
            reason=reason,
            secrets=_secrets(secrets),
        )
        return await self.stub.CompactMemory(
            self._expected(request, expected_revision), **self._kw()
        )

    async def capacity(self, revision: int | None = None) -> memory_pb2.Capacity:
        request = pb.GetCapacityRequest(memory_ref=self.ref)
        if revision is not None:
            request.revision = revision
        return (await self.stub.GetCapacity(request, **self._kw())).capacity

    async def head(self) -> int:
        return (await self.capacity()).revision

    async def revisions(self, since: int = 0, through: int = 0) -> list[memory_pb2.Revision]:
        request = pb.ListRevisionsRequest(memory_ref=self.ref, since=since, through=through)
        return list((await self.stub.ListRevisions(request, **self._kw())).revisions)

    async def changes(self, revision: int) -> list[memory_pb2.Change]:
        request = pb.GetChangesRequest(memory_ref=self.ref, revision=revision)
        return list((await self.stub.GetChanges(request, **self._kw())).changes)

    async def version(self, entry_version_id: str) -> memory_pb2.EntryVersion:
        request = pb.GetEntryVersionRequest(memory_ref=self.ref, entry_version_id=entry_version_id)
        return (await self.stub.GetEntryVersion(request, **self._kw())).entry

    async def list_memory(self, **fields: Any) -> memory_service_pb2.ListMemoryResponse:
        request = pb.ListMemoryRequest(memory_ref=self.ref, **fields)
        return await self.stub.ListMemory(request, **self._kw())

    async def search(self, **fields: Any) -> memory_service_pb2.SearchMemoryResponse:
        request = pb.SearchMemoryRequest(memory_ref=self.ref, **fields)
        return await self.stub.SearchMemory(request, **self._kw())

    async def cite(
        self, revision: int, entry_id: str, entry_version_id: str
    ) -> memory_service_pb2.ValidateCitationResponse:
        request = pb.ValidateCitationRequest(
            memory_ref=self.ref,
            revision=revision,
            entry_id=entry_id,
            entry_version_id=entry_version_id,
        )
        return await self.stub.ValidateCitation(request, **self._kw())


async def row_counts(db: asyncpg.Connection) -> dict[str, int]:
    """Rows in every memory table (the test database holds only what the test wrote)."""
    return {
        table: await db.fetchval(f"SELECT count(*) FROM memory.{table}")  # fixed names
        for table in MEMORY_TABLES
    }


async def rows_written_by_revision(
    db: asyncpg.Connection, memory_ref: str, revision: int
) -> dict[str, int]:
    """Rows inserted or updated, per memory table, by the transaction that wrote `revision`.

    Every row version a transaction inserts or updates carries its id as xmin, so counting the
    live rows with the revision row's xmin counts exactly that write (read it before the next
    write updates the memory row again).
    """
    xid = await db.fetchval(
        "SELECT r.xmin::text FROM memory.revisions r JOIN memory.memories m"
        " ON m.tenant_id = r.tenant_id AND m.memory_id = r.memory_id"
        " WHERE m.memory_ref = $1 AND r.revision = $2",
        memory_ref,
        revision,
    )
    return {
        table: await db.fetchval(f"SELECT count(*) FROM memory.{table} WHERE xmin::text = $1", xid)
        for table in MEMORY_TABLES
    }
