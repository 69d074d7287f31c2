"""Budget use cases of the per-call protocol: Reserve, Consume, Release and Check.

Reserve, Consume and Release run first as one statement (store/fast_path.py); when that answers
'slow' the call runs on the Python path (usecases/locked_reservations.py), which stays the
specification. This process sends at most two of them per run at a time (usecases/run_gates.py).
Check is one read-only statement with no transaction, shared by the tenant's concurrent Checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from budget_service.adapters.metrics import Tally
from budget_service.domain.accounting import decide_reserve
from budget_service.domain.commands import (
    Check,
    CheckResult,
    Consume,
    ConsumeResult,
    Mutation,
    Release,
    Reserve,
    ReserveResult,
)
from budget_service.domain.policy import Enforcement, model_verdict
from budget_service.domain.records import ReservationRecord
from budget_service.domain.refusals import BUDGET_REASONS, reserve_refusal, run_not_found
from budget_service.domain.run_state import (
    RUN_BALANCE,
    Balances,
    Breach,
    Contention,
    ReservationState,
    ReserveMode,
)
from budget_service.store import fast_path as fastpath
from budget_service.store import reads as store_reads
from budget_service.store import stored_replies as replies
from budget_service.store.reads import RunSnapshot
from budget_service.usecases.locked_reservations import LockedReservations, new_reservation_id
from budget_service.usecases.run_gates import RunGates
from budget_service.usecases.transactions import Transactions
from servicekit.coalesce import Coalescer
from servicekit.idempotency import RequestKey, request_id_reused

# Reasons a budget (not the run's lifecycle) gives; advisory mode turns only these into grants.


def _key(tenant: str, mutation: Mutation) -> RequestKey:
    return RequestKey.of(tenant, mutation.request_id, mutation.method, mutation.payload)


def _reply(answer: fastpath.Answer, mutation: Mutation) -> bytes:
    """The stored reply of a done or replayed call; the refusals the functions decide."""
    if answer.outcome == fastpath.REUSED:
        raise request_id_reused(mutation.request_id)
    if answer.outcome == fastpath.NOT_FOUND:
        raise run_not_found()
    assert answer.response is not None, answer.outcome
    return answer.response


class Reservations:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx
        self.locked = LockedReservations(tx)
        self._gates = RunGates(tx.settings.database.acquire_timeout_seconds)
        # Concurrent Checks of one tenant share one read statement.
        self._snapshots: Coalescer[str, str, RunSnapshot] = Coalescer(self._read_runs)

    async def _read_runs(self, tenant: str, run_ids: Sequence[str]) -> dict[str, RunSnapshot]:
        # One statement that enters the tenant itself: no transaction round trips.
        return await self._tx.db.read(lambda conn: store_reads.read_runs(conn, tenant, run_ids))

    def _count(self, tally: Tally) -> None:
        self._tx.metrics.apply(tally)

    async def reserve(self, tenant: str, mutation: Mutation, command: Reserve) -> ReserveResult:
        ttl = command.ttl_seconds or self._tx.settings.default_hold_ttl_seconds
        reservation_id = new_reservation_id()
        async with self._gates.reservation(tenant, command.run_id):
            answer = await fastpath.reserve(
                self._tx.db,
                _key(tenant, mutation),
                command,
                reservation_id,
                ttl,
                self._tx.host_advisory,
            )
            if answer.outcome == fastpath.SLOW:
                return await self.locked.reserve(tenant, mutation, command, reservation_id)
        result = replies.reserve_of(_reply(answer, mutation))
        if answer.outcome == fastpath.DONE:
            tally = Tally()
            tally.decision("reserve", "granted", "")
            tally.add("holds_opened")
            self._count(tally)
        return result

    async def consume(self, tenant: str, mutation: Mutation, command: Consume) -> ConsumeResult:
        async with self._gates.reservation(tenant, command.run_id):
            answer = await fastpath.consume(self._tx.db, _key(tenant, mutation), command)
            if answer.outcome == fastpath.SLOW:
                return await self.locked.consume(tenant, mutation, command)
        result = replies.consume_of(_reply(answer, mutation))
        if answer.outcome == fastpath.DONE and answer.tally is not None:
            tally = Tally()
            if result.reservation_state is ReservationState.CONSUMED:
                tally.reservations_ended([ReservationState.CONSUMED])
            for dimension in answer.tally["crossed"]:
                tally.add("crossings", dimension)
            for dimension in answer.tally["exhausted"]:
                tally.add("exhaustions", dimension)
            tally.decision("consume", "recorded")
            tally.consumed(tenant, answer.tally["project"], command.model, command.usage)
            tally.overruns(result.overrun)
            self._count(tally)
        return result

    async def release(self, tenant: str, mutation: Mutation, command: Release) -> ReservationRecord:
        async with self._gates.reservation(tenant, command.run_id):
            answer = await fastpath.release(self._tx.db, _key(tenant, mutation), command)
            if answer.outcome == fastpath.SLOW:
                return await self.locked.release(tenant, mutation, command)
        reservation = replies.release_of(_reply(answer, mutation))
        if answer.outcome == fastpath.DONE:
            tally = Tally()
            tally.reservations_ended([ReservationState.RELEASED])
            tally.decision("release", "recorded")
            self._count(tally)
        return reservation

    async def check(self, tenant: str, command: Check) -> CheckResult:
        """Read-only: judged exactly as Reserve would, by the database clock, writing nothing."""
        snapshot = await self._snapshots.get(tenant, command.run_id)
        if snapshot is None:
            raise run_not_found()
        tally = Tally()
        run = snapshot.run
        balances: Balances = {
            RUN_BALANCE: run.balances(snapshot.overdue),
            **{p.balance.key.ref: p.balance.judged(p.budget.policy) for p in snapshot.pools},
        }
        verdict = model_verdict(command.model, run.budget.model_lists) if command.model else None

        def decide() -> tuple[Breach | None, Contention | None]:
            decision = decide_reserve(balances, command.estimate, ReserveMode.ALL_OR_NOTHING)
            return decision.breach, decision.contention

        reason = reserve_refusal(run.status, verdict, decide)
        advisory = self._tx.enforcement(run.scope_advisory) is Enforcement.ADVISORY
        advisory_reason = ""
        if advisory and reason in BUDGET_REASONS:
            reason, advisory_reason = "", reason
        outcome = "refused" if reason else "advisory_refused" if advisory_reason else "granted"
        tally.decision("check", outcome, reason or advisory_reason)
        self._count(tally)
        view = self._tx.view(snapshot)
        state = run.status.state
        return CheckResult(not reason, reason, advisory_reason, state, view.dimensions, verdict)
