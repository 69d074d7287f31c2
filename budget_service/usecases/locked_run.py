"""One locked run in one transaction for the lifecycle calls that stay in Python (OpenRun's
replays, CloseRun, ResumeRun and the sweeper's expiries): lock, expire overdue holds, collect
changes. Reserve, Consume, Release and Check never come here: budget.decide_v1 decides them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg

from budget_service.domain import events as ev
from budget_service.domain.accounting import (
    Outcome,
    ResumeOutcome,
    settle_reservation,
)
from budget_service.domain.policy import Dimension, Enforcement, window_end, window_start
from budget_service.domain.records import (
    DimensionStatus,
    LedgerEntry,
    PoolBalance,
    PoolConfig,
    PoolKey,
    ReservationRecord,
    RunChanges,
    RunRecord,
    add,
    amounts,
    pool_statuses,
    run_statuses,
)
from budget_service.domain.run_state import (
    Amounts,
    Balance,
    BalanceRef,
    ReservationState,
    RunOutcome,
    RunState,
)
from budget_service.store import changes as store_write
from budget_service.store import locked_writes as store


def _release_on_pool(pool: PoolBalance, reservation: ReservationRecord) -> PoolBalance:
    before = {d: Balance(None, pool.consumed[d], pool.held[d]) for d in Dimension}
    after = settle_reservation(before, reservation.granted)
    held_model_calls = pool.held_model_calls - reservation.model_calls
    if held_model_calls < 0:
        raise ValueError("a hold releases more model calls than its pool holds")
    return replace(
        pool, held={d: b.held for d, b in after.items()}, held_model_calls=held_model_calls
    )


class AlreadyApplied(Exception):
    """A twin of this request (same request_id) committed while this one waited for the run
    lock: its stored response must be replayed instead of applying the request again, which
    could refuse (e.g. RESERVATION_SETTLED for a hold the twin just consumed)."""


@dataclass
class RunUnit:
    """The run row and its pool rows are locked (run first, pools in canonical order) for the
    rest of the transaction, so every value here is current and only this call changes them."""

    tenant: str
    run: RunRecord
    now: datetime  # the database clock at transaction start
    configs: dict[BalanceRef, PoolConfig]
    current: dict[BalanceRef, PoolKey]  # the current window of each configured pool
    pools: dict[PoolKey, PoolBalance]
    changes: RunChanges
    reservation_ends: list[ReservationState]
    touched: bool = False

    @classmethod
    async def lock(
        cls,
        conn: asyncpg.Connection,
        tenant: str,
        run_id: str,
        *,
        reservation_ids: Sequence[str] = (),
        all_open: bool = False,
        skip_locked: bool = False,
        request_id: str | None = None,
    ) -> RunUnit | None:
        locked = await store.lock_run(conn, tenant, run_id, skip_locked=skip_locked)
        if locked is None:
            return None
        # The idempotency check ran before the lock; every change to this run is serialized
        # behind the lock, so a twin that committed meanwhile is visible to this new statement.
        if request_id is not None and await store.request_done(conn, tenant, request_id):
            raise AlreadyApplied
        configs = {config.ref: config for config, _ in locked.pools}
        current = {
            ref: PoolKey(ref, window_start(c.window, locked.now)) for ref, c in configs.items()
        }
        # A new window's row is created before any pool row is locked, in canonical order, so
        # two calls creating rows never wait on each other crosswise.
        missing = sorted(
            (current[c.ref] for c, newest in locked.pools if newest != current[c.ref].window_start),
            key=lambda key: (key.ref.sort_key, key.window_start),
        )
        if missing:
            await store.insert_pools(conn, tenant, missing)
        pools: dict[PoolKey, PoolBalance] = {}
        other: Mapping[PoolKey, tuple[Mapping[Dimension, int], int]] = {}
        expired: list[ReservationRecord] = []
        if locked.run.pools:  # holds can only draw on pools the run was opened with
            pools = await store.lock_pools(
                conn, tenant, run_id, list(current.values()), reservation_ids, all_open
            )
        if locked.has_overdue or pools:
            expired, other = await store.expire_overdue(conn, tenant, run_id, list(pools))
        pools = {
            k: replace(
                p,
                overdue=amounts(other[k][0] if k in other else None),
                overdue_model_calls=other[k][1] if k in other else 0,
            )
            for k, p in pools.items()
        }
        changes = RunChanges(request_id=request_id)
        unit = cls(tenant, locked.run, locked.now, configs, current, pools, changes, [])
        for reservation in expired:  # already marked expired by the statement above
            unit._end(reservation, ReservationState.EXPIRED, "expire", mark=False)
        return unit

    # --- reading --------------------------------------------------------------------------

    def enforcement(self, host_advisory: bool) -> Enforcement:
        advisory = host_advisory or self.run.scope_advisory
        return Enforcement.ADVISORY if advisory else Enforcement.HARD

    def statuses(self) -> list[DimensionStatus]:
        """The run and the current window of every pool (with its model calls)."""
        found = run_statuses(self.run, self.run.balances())
        for ref in sorted(self.current, key=lambda r: r.sort_key):
            config, key = self.configs[ref], self.current[ref]
            end = window_end(config.window, key.window_start)
            reported = self.pools[key].reported(config.limits, config.max_model_calls)
            found += pool_statuses(ref, reported, end)
        return found

    # --- changing -------------------------------------------------------------------------

    def _pool_delta(self, reservation: ReservationRecord) -> None:
        for key in reservation.pools:
            if key in self.pools:  # rows of a deleted pool were still locked via the hold
                self.pools[key] = _release_on_pool(self.pools[key], reservation)
                self.changes.pools[key] = self.pools[key]

    def _end(
        self,
        reservation: ReservationRecord,
        state: ReservationState,
        decision: str,
        mark: bool = True,
    ) -> None:
        """Release or expiry: the hold stops counting on the run and on its pools."""
        run_after = settle_reservation(self.run.balances(), reservation.granted)
        self.run = replace(self.run, held={d: b.held for d, b in run_after.items()})
        self._pool_delta(reservation)
        self._ledger(
            decision,
            reservation,
            held=add({}, reservation.granted, -1),
            pools=reservation.pools,
            held_model_calls=-reservation.model_calls,
        )
        if mark:
            self.changes.ended[reservation.reservation_id] = state
        self.reservation_ends.append(state)
        self.touched = True

    def release(self, reservation: ReservationRecord) -> None:
        self._end(reservation, ReservationState.RELEASED, "release")

    def expire(self, reservation: ReservationRecord) -> None:
        self._end(reservation, ReservationState.EXPIRED, "expire")

    def apply(self, outcome: Outcome) -> None:
        """A new run status and its events (breaches, resumes)."""
        self.run = replace(self.run, status=outcome.status)
        if isinstance(outcome, ResumeOutcome):
            self.run = replace(
                self.run, budget=outcome.budget, policy_version=self.run.policy_version + 1
            )
        self.changes.events += outcome.events
        self.touched = True

    def close(self, outcome: RunOutcome) -> None:
        """FAILED stays FAILED (its failure code is the more useful fact); others become CLOSED."""
        state = self.run.status.state
        status = (
            self.run.status
            if state is RunState.FAILED
            else replace(self.run.status, state=RunState.CLOSED)
        )
        self.run = replace(self.run, status=status, outcome=outcome)
        self.changes.ledger.append(
            LedgerEntry("close", self.run.policy_version, detail={"outcome": outcome.value})
        )
        self.touched = True

    def note(self, decision: str, detail: Mapping[str, Any]) -> None:
        self.changes.ledger.append(LedgerEntry(decision, self.run.policy_version, detail=detail))

    def _ledger(
        self,
        decision: str,
        reservation: ReservationRecord,
        *,
        held: Amounts,
        pools: Sequence[PoolKey],
        reason: str | None = None,
        held_model_calls: int = 0,
    ) -> None:
        self.changes.ledger.append(
            LedgerEntry(
                decision,
                self.run.policy_version,
                reason=reason,
                reservation_id=reservation.reservation_id,
                model=reservation.model,
                held=amounts(held),
                pools=tuple(pools),
                held_model_calls=held_model_calls,
            )
        )

    async def write(self, conn: asyncpg.Connection) -> None:
        events = self.changes.events
        self.changes.first_seq = self.run.next_seq
        if events:
            self.run = replace(self.run, next_seq=self.run.next_seq + len(events))
        self.changes.run = self.run if self.touched or events else None
        if self.changes.run is not None or self.changes.ledger or self.changes.pools:
            await store_write.write(conn, self.tenant, self.run.run_id, self.changes)

    @property
    def events(self) -> list[ev.BudgetEvent]:
        return self.changes.events
