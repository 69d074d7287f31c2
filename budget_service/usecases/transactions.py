"""Transaction boundaries of the budget use cases: idempotent mutations, reads, metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from budget_service.adapters.metrics import BudgetMetrics, Tally
from budget_service.domain.commands import Mutation, RunView
from budget_service.domain.policy import Enforcement, HostCeilings
from budget_service.domain.records import pool_statuses, run_statuses
from budget_service.store.reads import RunSnapshot
from budget_service.usecases.settings import BudgetSettings
from servicekit.db import Database
from servicekit.errors import DomainError
from servicekit.idempotency import RequestKey, idempotent
from servicekit.tenancy import TenantDatabase, for_tenant

T = TypeVar("T")
REQUEST_LOG = "budget.request_log"


class AlreadyApplied(Exception):
    """A twin of this request (same request_id) committed while this one waited for the run
    lock: its stored response must be replayed instead of applying the request again, which
    could refuse (e.g. RESERVATION_SETTLED for a hold the twin just consumed)."""


@dataclass
class _Attempt:
    """What the last run of a mutation's work produced; counted only if it is what committed."""

    tally: Tally
    out: bytes | DomainError | None = None


class Transactions:
    """Runs each use case as one transaction; metrics are counted after commit, never on
    replays, rolled-back attempts or refusals that rolled back.

    Every transaction of a tenant's call enters that tenant (servicekit/tenancy.py), so
    row-level security backs every tenant filter; `upkeep` is the sweeper's cross-tenant way,
    through the owner's narrow functions of migration 0005 only."""

    def __init__(self, db: Database, settings: BudgetSettings, metrics: BudgetMetrics) -> None:
        self.db = db
        self.settings = settings
        self.metrics = metrics
        self.host_advisory = settings.enforce == Enforcement.ADVISORY.value
        self.ceilings = HostCeilings(
            max_tokens=settings.max_budget_tokens, max_cost_nanos=settings.max_budget_cost_nanos
        )

    async def mutate(
        self,
        tenant: str,
        mutation: Mutation,
        work: Callable[[asyncpg.Connection, Tally], Awaitable[T | DomainError]],
        encode: Callable[[T], bytes],
    ) -> bytes:
        """`work` returns a result (encoded, stored with the effect) or a DomainError to raise
        after committing its effects (a refusal that fails the run, or leaves a ledger row)."""
        last = _Attempt(Tally())

        async def attempt(conn: asyncpg.Connection) -> bytes | DomainError:
            last.tally = Tally()
            try:
                result = await work(conn, last.tally)
            except AlreadyApplied:
                # Storing this request id now conflicts, so idempotent() rolls this attempt
                # back and replays the twin's stored response (never counted here).
                last.out = None
                return b""
            last.out = result if isinstance(result, DomainError) else encode(result)
            return last.out

        key = RequestKey.of(tenant, mutation.request_id, mutation.method, mutation.payload)
        try:
            data = await idempotent(self.tenant(tenant), REQUEST_LOG, key, attempt)
        except DomainError as error:
            if error is last.out:  # identity: this attempt's refusal is what committed
                self.metrics.apply(last.tally)
            raise
        if data is last.out:  # a replayed response is a different object: no double counting
            self.metrics.apply(last.tally)
        return data

    def tenant(self, tenant: str) -> TenantDatabase:
        return for_tenant(self.db, tenant)

    async def read(self, tenant: str, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        return await self.tenant(tenant).read(work)

    async def upkeep(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Cross-tenant upkeep: `work` may call only the SECURITY DEFINER upkeep functions (as
        the application role it sees no tenant's rows otherwise), in one transaction."""
        return await self.db.upkeep_transaction(work)

    def enforcement(self, scope_advisory: bool) -> Enforcement:
        advisory = self.host_advisory or scope_advisory
        return Enforcement.ADVISORY if advisory else Enforcement.HARD

    def view(self, snapshot: RunSnapshot) -> RunView:
        """A run with its balances by the database clock: overdue holds no longer count."""
        run = snapshot.run
        statuses = run_statuses(run, run.balances(snapshot.overdue))
        for pool in sorted(snapshot.pools, key=lambda p: p.balance.key.ref.sort_key):
            key = pool.balance.key
            end = pool.window_end
            reported = pool.balance.reported(pool.budget.policy, pool.budget.max_model_calls)
            statuses += pool_statuses(key.ref, reported, end)
        advisory = self.enforcement(run.scope_advisory) is Enforcement.ADVISORY
        return RunView(run, statuses, advisory)
