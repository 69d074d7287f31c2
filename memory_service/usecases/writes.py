"""Write use cases: one transaction each, under the memory's head lock, idempotent by request_id."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from memory_service.adapters.embedder import Embedder
from memory_service.adapters.tokenizer import Tokenizer
from memory_service.domain.capacity import Operation
from memory_service.domain.commands import (
    AppendEntries,
    ChangeEntryStates,
    EntryDraft,
    OrganizeMemory,
    ReviseEntry,
)
from memory_service.domain.manifest import EntryState
from memory_service.domain.records import StoredVersion
from memory_service.domain.refusals import entry_not_found
from memory_service.domain.revisions import (
    RevisionPlan,
    plan_append,
    plan_dedupe,
    plan_forget,
    plan_reactivate,
    plan_revise,
)
from memory_service.domain.write_input_rules import (
    raise_if,
    validate_append,
    validate_organize,
    validate_revise,
    validate_state_change,
)
from memory_service.domain.write_redaction import redact_write
from memory_service.store import writes as store
from memory_service.usecases.preparation import (
    P,
    Prepared,
    draft_chars,
    merge_parts,
    parts_of,
    prepare_write,
)
from memory_service.usecases.write_path import Envelope, WritePath, WriteResult
from servicekit.auth import Identity
from servicekit.cpu import CpuPool
from servicekit.errors import FieldViolation, validation_error


@dataclass(frozen=True)
class AppendResult:
    result: WriteResult
    entries: tuple[StoredVersion, ...]
    redactions: Mapping[str, int]


@dataclass(frozen=True)
class ReviseResult:
    result: WriteResult
    entry: StoredVersion
    redactions: Mapping[str, int]


@dataclass(frozen=True)
class OrganizeResult:
    result: WriteResult
    deactivated_entry_ids: tuple[str, ...]


def stored_versions(plan: RevisionPlan, created_at: datetime) -> tuple[StoredVersion, ...]:
    return tuple(
        StoredVersion(
            entry_id=v.entry.entry_id,
            entry_version_id=v.entry.entry_version_id,
            version=v.version,
            previous_version_id=v.previous_version_id,
            kind=v.entry.kind,
            content=v.entry.content,
            tags=v.entry.tags,
            metadata=v.entry.metadata,
            content_hash=v.entry.content_hash,
            created_in_revision=plan.revision,
            created_at=created_at,
            expires_at=v.entry.expires_at,
            sizes=v.entry.sizes,
        )
        for v in plan.versions
    )


class MemoryWrites:
    """AppendEntries, ReviseEntry, ForgetEntries, ReactivateEntries and OrganizeMemory."""

    def __init__(
        self,
        path: WritePath,
        counter: Tokenizer,
        cpu: CpuPool,
        embedder: Embedder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._path = path
        self._counter = counter
        self._cpu = cpu
        self._embedder = embedder
        self._clock = clock

    async def _prepare(self, tenant: str, command: P) -> Prepared[P]:
        # Redaction, tokenizing and embedding are CPU-bound: off the event loop, on the pool
        # that bounds each tenant's share and starts nothing after the call's deadline. A
        # large append goes as parts of bounded text, one job after another, so the pool is
        # shared by work: another tenant's small write waits for one part, not the whole.
        limits = self._path.policy.limits
        if isinstance(command, AppendEntries) and len(command.entries) > 1:
            prepared = []
            for number, (first, part, chars) in enumerate(parts_of(command)):
                prepared.append(
                    await self._cpu.run(
                        tenant,
                        prepare_write,
                        part,
                        self._counter,
                        self._embedder,
                        None,
                        first,
                        cost=chars,
                        admitted=number > 0,
                    )
                )
            whole: Any = merge_parts(command, prepared, limits)  # P is AppendEntries here
            return whole  # type: ignore[no-any-return]
        cost = sum(draft_chars(d) for d in _drafts(command))
        return await self._cpu.run(
            tenant, prepare_write, command, self._counter, self._embedder, limits, cost=cost
        )

    async def append(
        self, identity: Identity, command: AppendEntries, envelope: Envelope[AppendResult]
    ) -> bytes:
        raise_if(validate_append(command, self._path.policy.limits, self._clock()))
        prepared = await self._prepare(identity.tenant, command)
        given = {d.entry_id: i for i, d in enumerate(command.entries) if d.entry_id}

        async def work(conn: asyncpg.Connection) -> AppendResult:
            head, key = await self._path.lock(conn, identity.tenant, command.target, create=True)
            if given:
                taken = await store.written_entry_ids(conn, key, list(given))
                if taken:
                    raise validation_error(
                        [
                            FieldViolation(f"entries[{given[i]}].entry_id", "already exists")
                            for i in sorted(taken, key=given.__getitem__)
                        ]
                    )
            plan = plan_append(head, prepared.entries)
            result, created_at = await self._path.commit(conn, key, plan)
            assert created_at is not None  # an append always has changes
            return AppendResult(result, stored_versions(plan, created_at), prepared.redactions)

        def count(outcome: AppendResult) -> None:
            self._path.committed(outcome.result, Operation.APPEND)
            self._path.metrics.entries_appended.inc(len(outcome.entries))
            self._path.metrics.redacted(prepared.redactions_by_detector)

        return await self._path.run(identity, prepared.redacted, envelope, work, count)

    async def revise(
        self, identity: Identity, command: ReviseEntry, envelope: Envelope[ReviseResult]
    ) -> bytes:
        raise_if(validate_revise(command, self._path.policy.limits, self._clock()))
        prepared = await self._prepare(identity.tenant, command)
        reason = prepared.redacted.command.reason

        async def work(conn: asyncpg.Connection) -> ReviseResult:
            head, key = await self._path.lock(conn, identity.tenant, command.target)
            item = (await store.head_items(conn, key, [command.entry_id])).get(command.entry_id)
            if item is None or item.state is not EntryState.ACTIVE:
                raise entry_not_found([command.entry_id])
            plan = plan_revise(head, item, prepared.entries[0], reason)
            result, created_at = await self._path.commit(conn, key, plan)
            assert created_at is not None  # a revise always has a change
            (entry,) = stored_versions(plan, created_at)
            return ReviseResult(result, entry, prepared.redactions)

        def count(outcome: ReviseResult) -> None:
            self._path.committed(outcome.result, Operation.REVISE)
            self._path.metrics.redacted(prepared.redactions_by_detector)

        return await self._path.run(identity, prepared.redacted, envelope, work, count)

    async def change_states(
        self,
        identity: Identity,
        command: ChangeEntryStates,
        envelope: Envelope[WriteResult],
        *,
        active: bool,
    ) -> bytes:
        """ForgetEntries (active=False) or ReactivateEntries (active=True); entries already in
        the target state are no-ops, and a call where all are creates no revision."""
        raise_if(validate_state_change(command, self._path.policy.limits))
        # At most one reason of MAX_REASON_CHARS: cheap enough to redact on the event loop.
        redacted = redact_write(command, self._path.policy.limits)
        reason = redacted.command.reason
        plan_states = plan_reactivate if active else plan_forget

        async def work(conn: asyncpg.Connection) -> WriteResult:
            head, key = await self._path.lock(conn, identity.tenant, command.target)
            items = await store.head_items(conn, key, command.entry_ids)
            missing = [entry_id for entry_id in command.entry_ids if entry_id not in items]
            if missing:  # never written, or compacted away: either way not in the manifest
                raise entry_not_found(missing)
            plan = plan_states(head, [items[i] for i in command.entry_ids], reason)
            result, _ = await self._path.commit(conn, key, plan)
            return result

        operation = Operation.REACTIVATE if active else Operation.FORGET

        def count(outcome: WriteResult) -> None:
            self._path.committed(outcome, operation)
            if outcome.changes:  # the redacted reason was stored
                self._path.metrics.redacted(redacted.by_detector)

        return await self._path.run(identity, redacted, envelope, work, count)

    async def organize(
        self, identity: Identity, command: OrganizeMemory, envelope: Envelope[OrganizeResult]
    ) -> bytes:
        raise_if(validate_organize(command))

        async def work(conn: asyncpg.Connection) -> OrganizeResult:
            head, key = await self._path.lock(conn, identity.tenant, command.target)
            plan = plan_dedupe(head, await store.duplicate_active_items(conn, key))
            result, _ = await self._path.commit(conn, key, plan)
            return OrganizeResult(result, tuple(c.entry_id for c in plan.changes))

        def count(outcome: OrganizeResult) -> None:
            self._path.committed(outcome.result, Operation.ORGANIZE)

        return await self._path.run(identity, redact_write(command), envelope, work, count)


def _drafts(command: AppendEntries | ReviseEntry) -> tuple[EntryDraft, ...]:
    return command.entries if isinstance(command, AppendEntries) else (command.entry,)
