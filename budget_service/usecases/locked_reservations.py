"""The Python path of Reserve, Consume and Release: one transaction with the run locked.

This is the specification the one-round-trip functions (store/fast_path.py) implement for the common
cases, and the path every other case takes: pools, overdue holds, advisory enforcement,
refusals and breaches. Results are stored as reply documents (store/stored_replies.py).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import asyncpg

from budget_service.adapters.metrics import Tally
from budget_service.domain.accounting import (
    apply_reserve_breach,
    decide_reserve,
    effective_reservation_state,
)
from budget_service.domain.commands import (
    Consume,
    ConsumeResult,
    Mutation,
    Release,
    Reserve,
    ReserveResult,
)
from budget_service.domain.policy import Enforcement, Scope, model_verdict
from budget_service.domain.records import ReservationRecord, amounts
from budget_service.domain.refusals import (
    budget_exhausted_error,
    budget_held_error,
    consume_settles_reservation,
    ensure_can_release,
    ensure_can_reserve,
    model_denied_error,
    reservation_not_found,
    reserve_refusal,
    run_not_found,
    run_state_error,
)
from budget_service.domain.run_state import ReservationState, RunState
from budget_service.store import locked_writes as store
from budget_service.store import stored_replies as replies
from budget_service.usecases.locked_run import RunUnit
from budget_service.usecases.transactions import Transactions
from servicekit.errors import DomainError

# How long a caller refused with BUDGET_HELD should wait before retrying the same request_id.
HELD_RETRY_SECONDS = 0.5


def new_reservation_id() -> str:
    return f"res_{uuid.uuid4().hex}"


class LockedReservations:
    """Each call locks its run (and pools) in one transaction and judges it in Python."""

    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    async def _lock(
        self,
        conn: asyncpg.Connection,
        tenant: str,
        mutation: Mutation,
        run_id: str,
        reservation_id: str = "",
    ) -> RunUnit:
        ids = [reservation_id] if reservation_id else []
        unit = await RunUnit.lock(
            conn, tenant, run_id, reservation_ids=ids, request_id=mutation.request_id
        )
        if unit is None:
            raise run_not_found()
        return unit

    async def reserve(
        self, tenant: str, mutation: Mutation, command: Reserve, reservation_id: str = ""
    ) -> ReserveResult:
        ttl = command.ttl_seconds or self._tx.settings.default_hold_ttl_seconds
        reservation_id = reservation_id or new_reservation_id()

        async def work(conn: asyncpg.Connection, tally: Tally) -> ReserveResult | DomainError:
            unit = await self._lock(conn, tenant, mutation, command.run_id)
            run, enforcement = unit.run, unit.enforcement(self._tx.host_advisory)
            refused = enforcement is Enforcement.HARD
            try:
                ensure_can_reserve(run.status)
            except DomainError as state_error:
                return await self._refuse(conn, unit, command, state_error, tally)
            verdict = model_verdict(command.model, run.budget.model_lists)
            # A tool-call or retry hold names no model: model policy governs model calls only.
            if command.model and not verdict.allowed and refused:  # before any spend
                scope = verdict.scope or Scope.RUN
                denied = model_denied_error(command.model, scope)
                return await self._refuse(conn, unit, command, denied, tally, scope)
            decision = decide_reserve(unit.judged(), command.estimate, command.mode, enforcement)
            if decision.breach is not None:
                outcome = apply_reserve_breach(decision.breach, run.status, run.budget, enforcement)
                unit.apply(outcome)
                if refused:
                    error = budget_exhausted_error(decision.breach)
                    if outcome.status.state is RunState.INTERRUPTED:
                        message = "the run is interrupted: resume it"
                        error = run_state_error("RUN_INTERRUPTED", RunState.INTERRUPTED, message)
                    scope = decision.breach.balance.scope
                    return await self._refuse(conn, unit, command, error, tally, scope)
            elif decision.contention is not None and refused:
                held = budget_held_error(decision.contention, HELD_RETRY_SECONDS)
                scope = decision.contention.balance.scope
                return await self._refuse(conn, unit, command, held, tally, scope)
            # Hard mode refused above in this same precedence; advisory mode reports it.
            judged = (decision.breach, decision.contention)
            reason = reserve_refusal(run.status, verdict if command.model else None, lambda: judged)
            pools = sorted(unit.current, key=lambda ref: ref.sort_key)
            reservation = ReservationRecord(
                reservation_id=reservation_id,
                run_id=command.run_id,
                model=command.model,
                requested=amounts(command.estimate),
                granted=amounts(decision.granted),
                state=ReservationState.OPEN,
                pools=tuple(unit.current[ref] for ref in pools),
                created_at=unit.now,
                expires_at=unit.now + timedelta(seconds=ttl),
            )
            unit.grant(reservation, reason)
            await unit.write(conn)
            tally.reservations_ended(unit.reservation_ends)
            tally.events(unit.events, enforcement)
            tally.decision("reserve", "advisory_refused" if reason else "granted", reason)
            if reason:
                tally.add("advisory_refusals", reason)
            tally.add("holds_opened")
            return ReserveResult(reservation, unit.statuses(), reason)

        data = await self._tx.mutate(tenant, mutation, work, replies.reserve_bytes)
        return replies.reserve_of(data)

    async def _refuse(
        self,
        conn: asyncpg.Connection,
        unit: RunUnit,
        command: Reserve,
        error: DomainError,
        tally: Tally,
        scope: Scope = Scope.RUN,
    ) -> DomainError:
        """Hard refusals commit a ledger row (and a breach's events and stop), no hold;
        `scope` is whose balance or policy refused (the run's own state: the run)."""
        unit.refuse(error.reason, command.model, command.estimate)
        await unit.write(conn)
        tally.reservations_ended(unit.reservation_ends)
        tally.events(unit.events, Enforcement.HARD)
        tally.refused(error.reason, scope)
        return error

    async def consume(self, tenant: str, mutation: Mutation, command: Consume) -> ConsumeResult:
        async def work(conn: asyncpg.Connection, tally: Tally) -> ConsumeResult:
            unit = await self._lock(conn, tenant, mutation, command.run_id, command.reservation_id)
            reservation, reservation_state = None, None
            if command.reservation_id:
                found = await self._reservation(conn, tenant, unit, command.reservation_id)
                # A released or expired hold no longer counts: the usage is recorded without
                # it, because the provider billed it; a consumed one refuses (RESERVATION_SETTLED).
                reservation = found if consume_settles_reservation(found.state) else None
                reservation_state = ReservationState.CONSUMED if reservation else found.state
            enforcement = unit.enforcement(self._tx.host_advisory)
            outcome = unit.consume(
                reservation,
                command.model,
                command.usage,
                enforcement,
                command.reservation_id or None,
            )
            await unit.write(conn)
            tally.reservations_ended(unit.reservation_ends)
            tally.events(unit.events, enforcement)
            tally.decision("consume", "recorded")
            tally.consumed(tenant, unit.run.project_id, command.model, command.usage)
            tally.overruns(outcome.overrun)
            state = unit.run.status.state
            return ConsumeResult(outcome.overrun, unit.statuses(), state, reservation_state)

        data = await self._tx.mutate(tenant, mutation, work, replies.consume_bytes)
        return replies.consume_of(data)

    async def _reservation(
        self, conn: asyncpg.Connection, tenant: str, unit: RunUnit, reservation_id: str
    ) -> ReservationRecord:
        """The named hold of this run, expired first if it is past its expiry by now."""
        found = await store.get_reservation(conn, tenant, unit.run.run_id, reservation_id)
        if found is None:
            raise reservation_not_found()
        state = effective_reservation_state(found.state, found.expires_at, unit.now)
        if state is not found.state:  # overdue but not yet marked: it ends here, as expired
            unit.expire(found)
            found = replace(found, state=state)
        return found

    async def release(self, tenant: str, mutation: Mutation, command: Release) -> ReservationRecord:
        async def work(conn: asyncpg.Connection, tally: Tally) -> ReservationRecord | DomainError:
            unit = await self._lock(conn, tenant, mutation, command.run_id, command.reservation_id)
            found = await self._reservation(conn, tenant, unit, command.reservation_id)
            try:
                ensure_can_release(found.state)
            except DomainError as settled:
                await unit.write(conn)  # keeps the expiries this call found
                tally.reservations_ended(unit.reservation_ends)
                tally.decision("release", "refused", settled.reason)
                return settled
            unit.release(found)
            await unit.write(conn)
            tally.reservations_ended(unit.reservation_ends)
            tally.decision("release", "recorded")
            return replace(found, state=ReservationState.RELEASED)

        data = await self._tx.mutate(tenant, mutation, work, replies.release_bytes)
        return replies.release_of(data)
