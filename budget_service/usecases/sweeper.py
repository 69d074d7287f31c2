"""Background upkeep on every replica: expire overdue holds, forget old requests, gauges."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from budget_service.adapters.metrics import Tally
from budget_service.domain.run_state import ReservationState
from budget_service.store import lifecycle as store_runs
from budget_service.store import reads as store_reads
from budget_service.store import watchers
from budget_service.usecases.transactions import REQUEST_LOG, Transactions
from servicekit.idempotency import forget_older_than
from servicekit.logs import error_text

log = logging.getLogger(__name__)

# Runs handled per sweep: a backlog drains over a few sweeps instead of one long one.
SWEEP_BATCH = 200
PURGE_EVERY_SECONDS = 60.0
# Watcher rows are refreshed every few seconds by their process; these are long gone.
STALE_WATCHER_SECONDS = 600.0


class Sweeper:
    """Cross-tenant steps (finding overdue runs, retention, gauges) go through the owner's
    narrow upkeep functions (Transactions.upkeep); each run is expired as its own tenant.

    Safe on every replica at once: each run is expired in its own short transaction under
    its row lock, skipping runs another replica or a live call holds (SKIP LOCKED); the
    transitions are guarded by state = 'open', so a hold still ends exactly once."""

    def __init__(self, tx: Transactions) -> None:
        self._tx = tx
        self._last_purge = 0.0
        self._last_gauges = float("-inf")

    async def run(self) -> None:
        interval = self._tx.settings.sweep_interval_seconds
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # an outage must not end the loop; the next sweep retries
                log.warning("sweep failed", extra={"error": error_text(exc)})
            await asyncio.sleep(interval)

    async def sweep(self) -> int:
        """One pass; returns how many holds it expired."""
        runs = await self._tx.upkeep(lambda conn: store_reads.overdue_runs(conn, SWEEP_BATCH))
        expired = 0
        for tenant, run_id in runs:
            try:
                expired += await self._expire(tenant, run_id)
            except Exception as exc:  # one run's failure must not keep the others overdue
                log.warning(
                    "expiring a run failed", extra={"tenant": tenant, "error": error_text(exc)}
                )
        if time.monotonic() - self._last_purge >= PURGE_EVERY_SECONDS:
            self._last_purge = time.monotonic()
            hours = self._tx.settings.idempotency_retention_hours
            await self._tx.upkeep(lambda conn: forget_older_than(conn, REQUEST_LOG, hours))
            await self._tx.upkeep(lambda conn: watchers.purge(conn, STALE_WATCHER_SECONDS))
        # The gauges read every tenant's open holds and pools: once per scrape interval
        # (RATION_GAUGE_INTERVAL_MS), not on every sweep, whose cost grew with the open holds.
        if time.monotonic() - self._last_gauges >= self._tx.settings.gauge_interval_seconds:
            self._last_gauges = time.monotonic()
            await self._refresh_gauges()
        return expired

    async def _expire(self, tenant: str, run_id: str) -> int:
        tally = Tally()

        async def work(conn: asyncpg.Connection) -> int:
            expired = await store_runs.expire_run(conn, tenant, run_id)
            tally.reservations_ended([ReservationState.EXPIRED] * expired)
            return expired

        count = await self._tx.tenant(tenant).transaction(work)
        self._tx.metrics.apply(tally)
        return count

    async def _refresh_gauges(self) -> None:
        async def work(
            conn: asyncpg.Connection,
        ) -> tuple[int, list[tuple[str, store_reads.PoolView]]]:
            return await store_reads.count_open_reservations(conn), await store_reads.all_pools(
                conn
            )

        open_reservations, pools = await self._tx.upkeep(work)
        self._tx.metrics.reservations_open.set(open_reservations)
        self._tx.metrics.set_pools(
            (
                tenant,
                pool.balance.key.ref,
                pool.balance.reported(pool.budget.policy, pool.budget.max_model_calls),
            )
            for tenant, pool in pools
        )
