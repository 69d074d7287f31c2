"""What every write shares: idempotency by request_id, the head lock, capacity check, commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import asyncpg

from memory_service.adapters.metrics import MemoryMetrics
from memory_service.domain.capacity import CapacityBudget, Operation, capacity_exceeded_error
from memory_service.domain.commands import WriteTarget
from memory_service.domain.compaction import CompactionPolicy, age_cutoff
from memory_service.domain.manifest import Change
from memory_service.domain.records import CapacityReport, Head
from memory_service.domain.refusals import memory_not_found, revision_conflict
from memory_service.domain.revisions import RevisionPlan
from memory_service.domain.write_input_rules import InputLimits
from memory_service.domain.write_redaction import RedactedWrite
from memory_service.store import writes as store
from memory_service.store.reads import compactable_count
from memory_service.store.writes import MemoryKey
from servicekit.auth import Identity
from servicekit.db import Database
from servicekit.idempotency import RequestKey, idempotent
from servicekit.tenancy import for_tenant

REQUEST_LOG = "memory.request_log"
T = TypeVar("T")
R = TypeVar("R", contravariant=True)


@dataclass(frozen=True)
class Envelope(Generic[R]):
    """The RPC a write came from (part of its fingerprint) and the encoder of its stored reply."""

    method: str
    encode: Callable[[R], bytes]


@dataclass(frozen=True)
class WritePolicy:
    """Configuration the write path enforces, built once from settings."""

    budget: CapacityBudget
    compaction: CompactionPolicy
    limits: InputLimits


@dataclass(frozen=True)
class WriteResult:
    """The revision a write created (the head when nothing changed) and its capacity."""

    revision: int
    changes: tuple[Change, ...]
    capacity: CapacityReport


def expect_head(head: Head, target: WriteTarget) -> None:
    """Compare-and-swap: a caller that names the head it read must still be looking at it."""
    expected = target.expected_revision
    if expected is not None and expected != head.revision:
        raise revision_conflict(expected, head.revision)


class WritePath:
    """What every write shares: idempotency, the head lock, the capacity check and the commit."""

    def __init__(self, db: Database, policy: WritePolicy, metrics: MemoryMetrics) -> None:
        self.db = db
        self.policy = policy
        self.metrics = metrics

    async def run(
        self,
        identity: Identity,
        write: RedactedWrite[Any],
        envelope: Envelope[T],
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        on_commit: Callable[[T], None],
    ) -> bytes:
        """Runs `work` once per request_id and returns the response bytes (stored or replayed).

        `on_commit` sees the outcome only when this call committed it, never on a replay, so
        metrics count each effect once and only after its transaction committed. The
        fingerprint is of the redacted command, never of the request as sent (DESIGN 4.6).
        """
        request_id = write.command.target.request_id
        key = RequestKey.of(identity.tenant, request_id, envelope.method, write.fingerprint)
        produced: list[tuple[T, bytes]] = []

        async def attempt(conn: asyncpg.Connection) -> bytes:
            outcome = await work(conn)
            encoded = envelope.encode(outcome)
            produced[:] = [(outcome, encoded)]
            return encoded

        data = await idempotent(for_tenant(self.db, identity.tenant), REQUEST_LOG, key, attempt)
        # idempotent() hands back the very bytes object `attempt` returned when that attempt
        # committed, and a fresh copy read from request_log when it replayed a stored response.
        if produced and data is produced[0][1]:
            on_commit(produced[0][0])
        return data

    async def lock(
        self,
        conn: asyncpg.Connection,
        tenant: str,
        target: WriteTarget,
        *,
        create: bool = False,
        shared: bool = False,
    ) -> tuple[Head, MemoryKey]:
        """Locks the head (creating the memory for a first write) and checks the expected head."""
        if create:
            head: Head | None = await store.lock_or_create_head(conn, tenant, target.memory_ref)
        else:
            head = await store.lock_head(conn, tenant, target.memory_ref, shared=shared)
        if head is None or head.memory_id is None:
            raise memory_not_found()
        expect_head(head, target)
        return head, MemoryKey(tenant, head.memory_id)

    async def capacity_at_head(
        self, conn: asyncpg.Connection, key: MemoryKey, head: Head
    ) -> CapacityReport:
        cutoff = age_cutoff(head.revision, self.policy.compaction)
        compactable = await compactable_count(conn, key, head.revision, cutoff, locked_head=True)
        return CapacityReport(head.revision, head.usage, compactable, self.policy.budget)

    async def commit(
        self, conn: asyncpg.Connection, key: MemoryKey, plan: RevisionPlan
    ) -> tuple[WriteResult, datetime | None]:
        """Checks the prepared revision against the budget, then writes it (no-ops write none).

        A refusal raises inside the transaction, so it rolls back: nothing is persisted, not
        even a memory row created for this write, and the request_id stays unused.
        """
        if plan.is_noop:
            capacity = await self.capacity_at_head(conn, key, plan.base)
            return WriteResult(plan.base.revision, (), capacity), None
        refusal = plan.refusal(self.policy.budget)
        if refusal is not None:
            self.metrics.capacity_refusals.labels(refusal.dimension.value).inc()
            raise capacity_exceeded_error(refusal)
        created_at = await store.write_revision(conn, key.tenant, plan)
        after = Head(
            key.memory_id,
            plan.revision,
            plan.active_count,
            plan.inactive_count,
            plan.manifest_bytes,
        )
        capacity = await self.capacity_at_head(conn, key, after)
        return WriteResult(plan.revision, plan.changes, capacity), created_at

    def committed(self, result: WriteResult, operation: Operation) -> None:
        """Metrics of a committed write; a no-op created no revision and counts as none."""
        if result.changes:
            self.metrics.committed(operation, result.capacity.usage.manifest_bytes)
