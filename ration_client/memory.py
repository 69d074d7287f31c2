"""MemoryClient: budgeted reads of agent memory and redacted, revisioned writes.

Every method returns the typed views of `ration_client.memory_views`, never protobuf."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from ration.memory.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc
from ration_client import memory_convert as convert
from ration_client._rpc import Client, new_request_id
from ration_client.memory_convert import EntryLike
from ration_client.memory_views import (
    Capacity,
    Change,
    Citation,
    Compaction,
    EntryInput,
    EntryVersion,
    MemoryCapabilities,
    MemoryList,
    Rank,
    Revision,
    SearchMode,
    SearchResult,
    TokenCounter,
    WriteResult,
)

__all__ = ["EntryInput", "MemoryClient"]

pb = memory_service_pb2


class MemoryClient(Client):
    """Async client; address and token default to RATION_MEMORY_ADDRESS and RATION_TOKEN.

    Entries are given as a string (the content), an `EntryInput` or a mapping of its fields.
    `secrets` ({secret_id: value}) are replaced by "[REDACTED:<secret_id>]" in every text of
    the write before anything is stored; they are never stored or echoed."""

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

    async def _write(
        self, method: Any, request: Any, expected_revision: int | None, request_id: str | None
    ) -> Any:
        """Every write: an idempotency key (a new UUIDv7 unless given; retries resend it) and
        the optional compare-and-swap on the head."""
        request.request_id = request_id or new_request_id()
        if expected_revision is not None:
            request.expected_revision = expected_revision
        return await self._rpc.unary(method, request)

    # ---- writes ----------------------------------------------------------------------------

    async def append(
        self,
        memory_ref: str,
        entries: Iterable[EntryLike],
        *,
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Appends entries in one revision; `.entries` are the stored (redacted) versions."""
        reply = await self._write(
            self._stub.AppendEntries,
            pb.AppendEntriesRequest(
                memory_ref=memory_ref,
                entries=[convert.entry_message(e) for e in entries],
                secrets=convert.secret_messages(secrets),
            ),
            expected_revision,
            request_id,
        )
        return convert.appended(reply)

    async def revise(
        self,
        memory_ref: str,
        entry_id: str,
        entry: EntryLike,
        *,
        reason: str = "",
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Writes a new version of an active entry; `.entries[0]` is that version."""
        reply = await self._write(
            self._stub.ReviseEntry,
            pb.ReviseEntryRequest(
                memory_ref=memory_ref,
                entry_id=entry_id,
                entry=convert.entry_message(entry),
                reason=reason,
                secrets=convert.secret_messages(secrets),
            ),
            expected_revision,
            request_id,
        )
        return convert.revised(reply)

    async def forget(
        self,
        memory_ref: str,
        entry_ids: Iterable[str],
        *,
        reason: str = "",
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Deactivates entries; `secrets` ({id: value}) are redacted from the reason."""
        request = pb.ForgetEntriesRequest(
            memory_ref=memory_ref,
            entry_ids=list(entry_ids),
            reason=reason,
            secrets=convert.secret_messages(secrets),
        )
        reply = await self._write(self._stub.ForgetEntries, request, expected_revision, request_id)
        return convert.write_result(reply.result)

    async def reactivate(
        self,
        memory_ref: str,
        entry_ids: Iterable[str],
        *,
        reason: str = "",
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Reactivates tombstones (not compacted ones)."""
        request = pb.ReactivateEntriesRequest(
            memory_ref=memory_ref,
            entry_ids=list(entry_ids),
            reason=reason,
            secrets=convert.secret_messages(secrets),
        )
        reply = await self._write(
            self._stub.ReactivateEntries, request, expected_revision, request_id
        )
        return convert.write_result(reply.result)

    async def dedupe(
        self,
        memory_ref: str,
        *,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """OrganizeMemory DEDUPE: deactivates exact duplicates (by content hash) among active
        entries, keeping the earliest; the changes name the entries deactivated."""
        request = pb.OrganizeMemoryRequest(
            memory_ref=memory_ref, mode=memory_pb2.ORGANIZE_MODE_DEDUPE
        )
        reply = await self._write(self._stub.OrganizeMemory, request, expected_revision, request_id)
        return convert.write_result(reply.result)

    async def compact(
        self,
        memory_ref: str,
        *,
        dry_run: bool = False,
        limit: int = 0,
        reason: str = "",
        secrets: Mapping[str, str] | None = None,
        expected_revision: int | None = None,
        request_id: str | None = None,
    ) -> Compaction:
        """Drops eligible tombstones; a real run needs the previewed head as
        `expected_revision` (preview with `dry_run=True`)."""
        request = pb.CompactMemoryRequest(
            memory_ref=memory_ref,
            dry_run=dry_run,
            limit=limit,
            reason=reason,
            secrets=convert.secret_messages(secrets),
        )
        reply = await self._write(self._stub.CompactMemory, request, expected_revision, request_id)
        return convert.compaction(reply)

    # ---- reads -----------------------------------------------------------------------------

    async def list(
        self,
        memory_ref: str,
        *,
        token_budget: int = 0,
        token_counter: TokenCounter | None = None,
        rank: Rank = Rank.RECENCY,
        query: str = "",
        limit: int = 0,
        tag: str = "",
        revision: int | None = None,
        run_id: str = "",
    ) -> MemoryList:
        """The ranked prefix of memory that fits `token_budget` (whole entries only; 0: no
        budget) in `token_counter` units (None: the server's default). With `run_id` the
        budget is clamped to the run's remaining tokens."""
        request = pb.ListMemoryRequest(
            memory_ref=memory_ref,
            token_budget=token_budget,
            token_counter=convert.token_counter_number(token_counter),
            rank=convert.RANKS.number(rank),
            query=query,
            limit=limit,
            tag=tag,
            run_id=run_id,
        )
        if revision is not None:
            request.revision = revision
        return convert.memory_list(await self._rpc.unary(self._stub.ListMemory, request))

    async def search(
        self,
        memory_ref: str,
        query: str = "",
        *,
        mode: SearchMode = SearchMode.SEMANTIC,
        limit: int = 10,
        tags: Iterable[str] = (),
        kind: str = "",
        revision: int | None = None,
    ) -> SearchResult:
        """SEMANTIC: the best `limit` matches of `query`; FILTER: newest first. Both narrowed
        by every one of `tags` and by `kind`."""
        request = pb.SearchMemoryRequest(
            memory_ref=memory_ref,
            query=query,
            mode=convert.SEARCH_MODES.number(mode),
            limit=limit,
            tags=list(tags),
            kind=kind,
        )
        if revision is not None:
            request.revision = revision
        return convert.search_result(await self._rpc.unary(self._stub.SearchMemory, request))

    async def capacity(self, memory_ref: str, revision: int | None = None) -> Capacity:
        request = pb.GetCapacityRequest(memory_ref=memory_ref)
        if revision is not None:
            request.revision = revision
        return convert.capacity((await self._rpc.unary(self._stub.GetCapacity, request)).capacity)

    async def revisions(
        self, memory_ref: str, since: int = 0, through: int = 0
    ) -> tuple[Revision, ...]:
        """Revisions in (since, through] (through 0: the head), at most the server's
        max_history_revisions at a time (HistoryWindowExceeded beyond)."""
        request = pb.ListRevisionsRequest(memory_ref=memory_ref, since=since, through=through)
        reply = await self._rpc.unary(self._stub.ListRevisions, request)
        return tuple(convert.revision(r) for r in reply.revisions)

    async def changes(
        self, memory_ref: str, *, revision: int | None = None, since: int | None = None
    ) -> AsyncIterator[Change]:
        """The changes of one revision, or of every revision after `since` (neither: all),
        ordered by (revision, entry_id), following the pages."""
        token = ""
        while True:
            request = pb.ListChangesRequest(memory_ref=memory_ref, page_token=token)
            if revision is not None:
                request.revision = revision
            elif since is not None:
                request.since = since
            reply = await self._rpc.unary(self._stub.ListChanges, request)
            for change in reply.changes:
                yield convert.change(change)
            token = reply.next_page_token
            if not token:
                return

    async def capabilities(self) -> MemoryCapabilities:
        reply = await self._rpc.unary(self._stub.GetCapabilities, pb.GetCapabilitiesRequest())
        return convert.capabilities(reply)

    async def entry_version(self, memory_ref: str, entry_version_id: str) -> EntryVersion:
        request = pb.GetEntryVersionRequest(
            memory_ref=memory_ref, entry_version_id=entry_version_id
        )
        reply = await self._rpc.unary(self._stub.GetEntryVersion, request)
        return convert.entry_version(reply.entry)

    async def validate_citation(
        self, memory_ref: str, revision: int, entry_id: str, entry_version_id: str
    ) -> Citation:
        request = pb.ValidateCitationRequest(
            memory_ref=memory_ref,
            revision=revision,
            entry_id=entry_id,
            entry_version_id=entry_version_id,
        )
        return convert.citation(await self._rpc.unary(self._stub.ValidateCitation, request))
