"""Budget use cases of run lifecycle, scope budgets and event reads: one transaction each."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import replace

import asyncpg

from budget_service.adapters.metrics import Tally
from budget_service.domain.commands import (
    CloseResult,
    CloseRun,
    EventsPage,
    Mutation,
    OpenRun,
    ResumeRun,
    RunView,
    ScopeBudgetPage,
    ScopeBudgetQuery,
    ScopeBudgetSortKey,
    ScopeBudgetView,
    ScopeKey,
)
from budget_service.domain.fingerprints import is_same_open, open_run_fingerprint
from budget_service.domain.policy import (
    WINDOW_EPOCH,
    Enforcement,
    ScopeBudget,
    ScopeBudgetKind,
    resolve_effective_budget,
)
from budget_service.domain.records import RunRecord, amounts
from budget_service.domain.refusals import (
    resume_error,
    run_exists,
    run_not_found,
    scope_budget_not_found,
)
from budget_service.domain.run_state import BalanceRef, ReservationState, RunStatus
from budget_service.store import lifecycle as store_runs
from budget_service.store import reads as store_reads
from budget_service.store import scope_budget_list
from budget_service.store.event_hub import EventHub
from budget_service.store.reads import StoredEvent
from budget_service.usecases.stream_slots import StreamSlots
from budget_service.usecases.transactions import AlreadyApplied, Transactions

WATCH_BATCH = 100


def _ensure_locked(status: str) -> None:
    """A lifecycle call found its run: not missing, and no twin committed meanwhile."""
    if status == store_runs.MISSING:
        raise run_not_found()
    if status == store_runs.APPLIED:
        raise AlreadyApplied


class BudgetService:
    def __init__(self, tx: Transactions, hub: EventHub, streams: StreamSlots | None = None) -> None:
        self._tx = tx
        self._hub = hub
        self._streams = streams or StreamSlots(tx.settings.max_streams_per_tenant)

    async def _view(self, conn: asyncpg.Connection, tenant: str, run_id: str) -> RunView:
        snapshot = await store_reads.read_run(conn, tenant, run_id)
        if snapshot is None:
            raise run_not_found()
        return self._tx.view(snapshot)

    async def open_run(
        self, tenant: str, mutation: Mutation, command: OpenRun, encode: Callable[[RunView], bytes]
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> RunView:
            draft = self._draft(command)
            scopes = await store_reads.scope_budgets_of(conn, tenant, draft.owners)
            budget = resolve_effective_budget(command.policy, scopes, self._tx.ceilings)
            pools = tuple(
                BalanceRef(b.scope, b.scope_id) for b in scopes if b.kind is ScopeBudgetKind.POOLED
            )
            advisory = any(b.enforcement is Enforcement.ADVISORY for b in scopes)
            draft = replace(draft, budget=budget, pools=pools, scope_advisory=advisory)
            if not await store_runs.open_run(conn, tenant, draft, mutation.request_id):
                existing = await store_reads.get_run(conn, tenant, command.run_id)
                if existing is None or not is_same_open(existing.open_fingerprint, command):
                    raise run_exists(command.run_id)
            return await self._view(conn, tenant, command.run_id)

        return await self._tx.mutate(tenant, mutation, work, encode)

    def _draft(self, command: OpenRun) -> RunRecord:
        """The run to insert; the database stamps created_at and updated_at itself."""
        zero, unset = amounts(), WINDOW_EPOCH
        return RunRecord(
            run_id=command.run_id,
            project_id=command.project_id,
            workflow_id=command.workflow_id,
            agent_id=command.agent_id,
            budget=resolve_effective_budget(command.policy),
            status=RunStatus(),
            consumed=zero,
            held=zero,
            pools=(),
            scope_advisory=False,
            policy_version=1,
            next_seq=1,
            open_fingerprint=open_run_fingerprint(command),
            created_at=unset,
            updated_at=unset,
            end_user_id=command.end_user_id,
            api_key_id=command.api_key_id,
            tags=command.tags,
        )

    async def get_run(self, tenant: str, run_id: str) -> RunView:
        return await self._tx.read(tenant, lambda conn: self._view(conn, tenant, run_id))

    async def close_run(
        self,
        tenant: str,
        mutation: Mutation,
        command: CloseRun,
        encode: Callable[[CloseResult], bytes],
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> CloseResult:
            closed = await store_runs.close_run(
                conn, tenant, command.run_id, mutation.request_id, command.outcome
            )
            _ensure_locked(closed.status)
            tally.reservations_ended(
                [ReservationState.EXPIRED] * closed.expired
                + [ReservationState.RELEASED] * closed.released
            )
            return CloseResult(await self._view(conn, tenant, command.run_id), closed.released)

        return await self._tx.mutate(tenant, mutation, work, encode)

    async def resume_run(
        self,
        tenant: str,
        mutation: Mutation,
        command: ResumeRun,
        encode: Callable[[RunView], bytes],
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> RunView:
            resumed = await store_runs.resume_run(
                conn,
                tenant,
                command.run_id,
                mutation.request_id,
                command.delta,
                self._tx.ceilings,
                command.approver,
                command.note,
            )
            _ensure_locked(resumed.status)
            if resumed.status != "done":  # raised: the transaction rolls back, expiries too
                raise resume_error(resumed.status, resumed.state, resumed.dimensions)
            tally.reservations_ended([ReservationState.EXPIRED] * resumed.expired)
            return await self._view(conn, tenant, command.run_id)

        return await self._tx.mutate(tenant, mutation, work, encode)

    # --- events ---------------------------------------------------------------------------

    async def list_events(
        self, tenant: str, run_id: str, after_seq: int, page_size: int
    ) -> EventsPage:
        async def work(conn: asyncpg.Connection) -> EventsPage:
            run = await store_reads.get_run(conn, tenant, run_id)
            if run is None:
                raise run_not_found()
            found = await store_reads.list_events(conn, tenant, run_id, after_seq, page_size + 1)
            more = len(found) > page_size
            page = found[:page_size]
            return EventsPage(run, page, page[-1].seq if more else None)

        return await self._tx.read(tenant, work)

    async def watch(
        self, tenant: str, run_id: str, after_seq: int
    ) -> AsyncGenerator[tuple[RunRecord, StoredEvent], None]:
        """Every event after `after_seq` exactly once, in order, then live ones until the
        client cancels or the server closes the hub. Holds one of the tenant's stream slots
        throughout (TOO_MANY_STREAMS when none is free)."""
        with self._streams.slot(tenant):
            async with self._hub.subscribe(tenant, run_id) as subscription:
                run = await self._tx.read(
                    tenant, lambda conn: store_reads.get_run(conn, tenant, run_id)
                )
                if run is None:
                    raise run_not_found()
                last = after_seq
                while not self._hub.closed:
                    subscription.clear()
                    batch = await self._events_after(tenant, run_id, last)
                    for event in batch:
                        yield run, event
                        last = event.seq
                    if len(batch) < WATCH_BATCH:
                        await subscription.wait()

    async def _events_after(self, tenant: str, run_id: str, after: int) -> list[StoredEvent]:
        async def work(conn: asyncpg.Connection) -> list[StoredEvent]:
            return await store_reads.list_events(conn, tenant, run_id, after, WATCH_BATCH)

        return await self._tx.read(tenant, work)

    # --- scope budgets --------------------------------------------------------------------

    async def put_scope_budget(
        self,
        tenant: str,
        mutation: Mutation,
        budget: ScopeBudget,
        encode: Callable[[ScopeBudgetView], bytes],
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> ScopeBudgetView:
            stored = await store_reads.put_scope_budget(conn, tenant, budget)
            return ScopeBudgetView(stored, None)

        return await self._tx.mutate(tenant, mutation, work, encode)

    async def get_scope_budget(self, tenant: str, key: ScopeKey) -> ScopeBudgetView:
        async def work(conn: asyncpg.Connection) -> ScopeBudgetView:
            found = await store_reads.get_scope_budget(
                conn, tenant, key.scope, key.scope_id, key.kind
            )
            if found is None:
                raise scope_budget_not_found()
            return ScopeBudgetView(*found)

        return await self._tx.read(tenant, work)

    async def list_scope_budgets(
        self,
        tenant: str,
        query: ScopeBudgetQuery,
        after: ScopeBudgetSortKey | None,
        page_size: int,
    ) -> ScopeBudgetPage:
        """One page after `after` (the previous page's last key), read in the tenant: one row
        more than the page tells whether another page follows."""

        async def work(conn: asyncpg.Connection) -> ScopeBudgetPage:
            found = await scope_budget_list.list_scope_budgets(
                conn, tenant, query, after, page_size + 1
            )
            page = found[:page_size]
            if len(found) <= page_size:
                return ScopeBudgetPage(page, None)
            last = page[-1].budget
            return ScopeBudgetPage(
                page, ScopeBudgetSortKey(last.scope.value, last.scope_id, last.kind.value)
            )

        return await self._tx.read(tenant, work)

    async def delete_scope_budget(
        self, tenant: str, mutation: Mutation, key: ScopeKey, encode: Callable[[None], bytes]
    ) -> bytes:
        async def work(conn: asyncpg.Connection, tally: Tally) -> None:
            await store_reads.delete_scope_budget(conn, tenant, key.scope, key.scope_id, key.kind)

        return await self._tx.mutate(tenant, mutation, work, encode)
