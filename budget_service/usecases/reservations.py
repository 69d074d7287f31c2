"""Budget use cases of the per-call protocol: Reserve, Consume, Release and Check.

The ledger decides (DESIGN 3.3): every rule runs in the database, in `budget.decide_v3`
(store/functions/decide_v3.sql and the engine it calls); this module turns a call into a
batch item, hands it to the process's group-commit batcher (servicekit/batching.py, one queue
per tenant), and turns the answer back into the call's result or error and its metrics.
Nothing here judges a call.

Reserve, Consume and Release of a tenant that arrive while its previous batches are at the
database go together as one statement and one transaction; each caller is answered after
that COMMIT. Concurrent Checks of a tenant share one read-only statement the same way.

A run locked elsewhere (a long transaction, an operator's SELECT ... FOR UPDATE, another
replica's slow batch) delays only its own calls (DESIGN 5, issue 24). A tenant's batch waits
for its runs' locks BRIEF_LOCK_WAIT_MS at most: another replica's batch on the same hot run
holds it for milliseconds, and waiting that long is cheaper than deciding the run apart. When
the wait runs out (nothing was done), the batch is sent again skipping the locked runs, and so
are the tenant's batches for SKIP_SECONDS after (one brief wait per tenant and period, not one
per batch): the locked run's items come back BUSY, undecided. Each is sent again to a lane of
its own run (a group commit keyed by tenant and run) whose statement waits for that run's
lock, within the call's deadline and the statement timeout, while the tenant's batches go on
with its other runs. Only the lane's connection waits; with a per-tenant share of the pool set
(RATION_DB_TENANT_SHARE) the lanes of a tenant hold no more than it, so many locked runs of
one tenant cannot take the connections other tenants need.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence

from budget_service.adapters.metrics import decision_tally
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
from budget_service.domain.policy import Dimension, ModelVerdict, Scope
from budget_service.domain.records import ReservationRecord
from budget_service.domain.refusals import refusal_error
from budget_service.domain.run_state import ReserveMode, RunState
from budget_service.store import decisions
from budget_service.store import stored_replies as replies
from budget_service.usecases.transactions import Transactions
from servicekit.batching import GroupCommit, Pacer
from servicekit.idempotency import RequestKey, request_id_reused

# How long a tenant's batch waits for its runs' locks before it skips the locked ones, and how
# long after that the tenant's batches skip at once.
BRIEF_LOCK_WAIT_MS = 200
SKIP_SECONDS = 2.0


def new_reservation_id() -> str:
    return f"res_{uuid.uuid4().hex}"


def _amounts(values: Mapping[Dimension, int]) -> tuple[int, int, int, int]:
    tokens, cost, tool_calls, retries = (int(values.get(d, 0)) for d in Dimension)
    return tokens, cost, tool_calls, retries


class Reservations:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx
        batch = tx.settings.batch
        self._mutations: GroupCommit[str, decisions.Item, decisions.Answer] = GroupCommit(
            self._decide,
            max_batch=batch.max_items,
            inflight=batch.inflight,
            observe=tx.metrics.batch_size.observe,
            default_wait=tx.settings.database.acquire_timeout_seconds,
            pacer=self._pacer(),
        )
        # Tenants whose batches skip locked runs, until when (after a brief wait ran out).
        self._skipping: dict[str, float] = {}
        # The lanes of runs locked elsewhere: one batch per run at the database, waiting.
        self._locked_runs: GroupCommit[tuple[str, str], decisions.Item, decisions.Answer] = (
            GroupCommit(
                self._decide_waiting,
                max_batch=batch.max_items,
                inflight=1,
                default_wait=tx.settings.database.acquire_timeout_seconds,
            )
        )
        self._checks: GroupCommit[str, decisions.Item, decisions.Answer] = GroupCommit(
            self._check,
            max_batch=batch.max_items,
            inflight=batch.inflight,
            observe=tx.metrics.check_batch_size.observe,
            default_wait=tx.settings.database.acquire_timeout_seconds,
            pacer=self._pacer(),
        )

    def _pacer(self) -> Pacer[str] | None:
        """A batcher's own pacer (Checks and mutations are paced apart), if pacing is on."""
        batch = self._tx.settings.batch
        if not batch.paced:
            return None
        return Pacer(floor=batch.pacing_floor, observe_hold=self._tx.metrics.paced_seconds.inc)

    async def _decide(self, tenant: str, items: Sequence[decisions.Item]) -> list[decisions.Answer]:
        db, advisory = self._tx.db, self._tx.host_advisory
        skipping_until = self._skipping.get(tenant)
        if skipping_until is None or skipping_until <= time.monotonic():
            self._skipping.pop(tenant, None)
            try:
                return await decisions.decide(
                    db, tenant, items, advisory, brief_wait_ms=BRIEF_LOCK_WAIT_MS
                )
            except decisions.RunLocked:
                self._skipping[tenant] = time.monotonic() + SKIP_SECONDS
        return await decisions.decide(db, tenant, items, advisory)

    async def _decide_waiting(
        self, lane: tuple[str, str], items: Sequence[decisions.Item]
    ) -> list[decisions.Answer]:
        tenant, _ = lane
        return await decisions.decide(self._tx.db, tenant, items, self._tx.host_advisory, wait=True)

    async def _check(self, tenant: str, items: Sequence[decisions.Item]) -> list[decisions.Answer]:
        return await decisions.check(self._tx.db, tenant, items, self._tx.host_advisory)

    async def _mutate(
        self,
        tenant: str,
        mutation: Mutation,
        item: decisions.Item,
        amounts: Mapping[Dimension, int],
    ) -> bytes:
        """The reply document of a done or replayed call; refusals raised as DomainErrors.
        Metrics count what committed, once: replays count nothing."""
        key = RequestKey.of(tenant, mutation.request_id, mutation.method, mutation.payload)
        item = decisions.Item(
            item.kind,
            item.run_id,
            item.amounts,
            key.request_id,
            key.fingerprint,
            item.reservation_id,
            item.model,
            item.up_to,
            item.ttl_seconds,
        )
        answer = await self._mutations.submit(tenant, item)
        if answer.outcome == decisions.BUSY:  # its run is locked elsewhere: wait in its lane
            self._tx.metrics.locked_run_waits.inc()
            answer = await self._locked_runs.submit((tenant, item.run_id), item)
        if answer.tally is not None:
            self._tx.metrics.apply(decision_tally(answer.tally, tenant, item.model, amounts))
        if answer.outcome in (decisions.DONE, decisions.REPLAY):
            assert answer.response is not None
            return answer.response
        if answer.outcome == decisions.REUSED:
            raise request_id_reused(mutation.request_id)
        assert answer.refusal is not None, answer.outcome
        raise refusal_error(answer.refusal)

    async def reserve(self, tenant: str, mutation: Mutation, command: Reserve) -> ReserveResult:
        ttl = command.ttl_seconds or self._tx.settings.default_hold_ttl_seconds
        item = decisions.Item(
            "reserve",
            command.run_id,
            _amounts(command.estimate),
            reservation_id=new_reservation_id(),
            model=command.model,
            up_to=command.mode is ReserveMode.UP_TO,
            ttl_seconds=ttl,
        )
        data = await self._mutate(tenant, mutation, item, command.estimate)
        return replies.reserve_of(data)

    async def consume(self, tenant: str, mutation: Mutation, command: Consume) -> ConsumeResult:
        item = decisions.Item(
            "consume",
            command.run_id,
            _amounts(command.usage),
            reservation_id=command.reservation_id,
            model=command.model,
        )
        data = await self._mutate(tenant, mutation, item, command.usage)
        return replies.consume_of(data)

    async def release(self, tenant: str, mutation: Mutation, command: Release) -> ReservationRecord:
        item = decisions.Item("release", command.run_id, reservation_id=command.reservation_id)
        data = await self._mutate(tenant, mutation, item, {})
        return replies.release_of(data)

    async def check(self, tenant: str, command: Check) -> CheckResult:
        """Read-only: judged exactly as Reserve would, by the database clock, writing nothing."""
        item = decisions.Item(
            "check", command.run_id, _amounts(command.estimate), model=command.model
        )
        answer = await self._checks.submit(tenant, item)
        if answer.outcome != decisions.CHECKED:
            assert answer.refusal is not None, answer.outcome
            raise refusal_error(answer.refusal)
        if answer.tally is not None:
            self._tx.metrics.apply(decision_tally(answer.tally, tenant, command.model, {}))
        assert answer.response is not None
        doc = json.loads(answer.response)
        denied_by = doc["denied_by"]
        verdict = None
        if denied_by is not None:
            scope = Scope(denied_by) if denied_by else None
            verdict = ModelVerdict(not denied_by, scope, doc.get("denied_by_id") or "")
        reason = doc["reason"]
        dimensions = replies.statuses_of(doc["dimensions"])
        state = RunState(doc["state"])
        return CheckResult(not reason, reason, doc["advisory_reason"], state, dimensions, verdict)
