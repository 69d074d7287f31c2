"""CompactMemory: preview (any reader, even while disabled) and commit (admin, enabled, CAS)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from memory_service.domain.capacity import Operation
from memory_service.domain.commands import CompactMemory
from memory_service.domain.compaction import (
    CompactionPlan,
    compaction_disabled_error,
    plan_compaction,
)
from memory_service.domain.records import CapacityReport, Head
from memory_service.domain.revisions import plan_compaction_revision
from memory_service.domain.write_input_rules import raise_if, validate_compact
from memory_service.domain.write_redaction import redact_write
from memory_service.store import writes as store
from memory_service.store.writes import MemoryKey
from memory_service.usecases.write_path import Envelope, WritePath
from servicekit.auth import Identity
from servicekit.tenancy import for_tenant


@dataclass(frozen=True)
class CompactResult:
    dry_run: bool
    entry_ids: tuple[str, ...]  # dropped (or droppable) ids in entry_id byte order
    reclaimed_bytes: int  # signed; 0 for a no-op
    revision: int  # the new revision, or the head for a dry run or a no-op
    capacity: CapacityReport


class MemoryCompaction:
    def __init__(self, path: WritePath) -> None:
        self._path = path

    async def _plan(
        self, conn: asyncpg.Connection, key: MemoryKey, head: Head, command: CompactMemory
    ) -> CompactionPlan:
        # The preview and the commit plan with the same function over the same head, so a dry
        # run reports exactly the ids and bytes a real run at that head would.
        tombstones = await store.head_tombstones(conn, key)
        return plan_compaction(
            tombstones,
            head.usage,
            head.revision,
            self._path.policy.compaction,
            limit=command.limit,
            reason=command.reason or None,
        )

    async def compact(
        self, identity: Identity, command: CompactMemory, envelope: Envelope[CompactResult]
    ) -> bytes:
        # The table (api/roles.py) lets readers in, since a dry run only reads; a commit
        # deletes history, and whether this call is one depends on the request: admin only.
        if not command.dry_run:
            identity.require("admin")
        raise_if(validate_compact(command, self._path.policy.limits))
        # One reason of at most MAX_REASON_CHARS: cheap enough to redact on the event loop.
        redacted = redact_write(command, self._path.policy.limits)
        command = redacted.command
        if command.dry_run:
            return envelope.encode(await self._preview(identity, command))
        if not self._path.policy.compaction.enabled:
            raise compaction_disabled_error()

        async def work(conn: asyncpg.Connection) -> CompactResult:
            head, key = await self._path.lock(conn, identity.tenant, command.target)
            compaction = await self._plan(conn, key, head, command)
            plan = plan_compaction_revision(head, compaction)
            result, _ = await self._path.commit(conn, key, plan)
            return CompactResult(
                False,
                compaction.entry_ids,
                compaction.reclaimed_bytes,
                result.revision,
                result.capacity,
            )

        def count(outcome: CompactResult) -> None:
            metrics = self._path.metrics
            metrics.compactions.labels("commit").inc()
            metrics.compacted_entries.inc(len(outcome.entry_ids))
            if outcome.entry_ids:
                metrics.committed(Operation.COMPACT, outcome.capacity.usage.manifest_bytes)
                metrics.redacted(redacted.by_detector)

        return await self._path.run(identity, redacted, envelope, work, count)

    async def _preview(self, identity: Identity, command: CompactMemory) -> CompactResult:
        async def work(conn: asyncpg.Connection) -> CompactResult:
            # A shared lock pins the head for the few reads of the preview without blocking
            # other readers; writers wait for it, so the plan matches one exact head.
            head, key = await self._path.lock(conn, identity.tenant, command.target, shared=True)
            compaction = await self._plan(conn, key, head, command)
            capacity = await self._path.capacity_at_head(conn, key, head)
            return CompactResult(
                True, compaction.entry_ids, compaction.reclaimed_bytes, head.revision, capacity
            )

        result = await for_tenant(self._path.db, identity.tenant).transaction(work)
        self._path.metrics.compactions.labels("dry_run").inc()
        return result
