"""`ration notify`: follows tenants' event streams and POSTs the chosen events to webhooks.

Each (tenant, webhook) is delivered by one process at a time: the holder of its lease in
budget.notify_progress (migration 0009). The holder reads the tenant's events in the stream's
order from its stored position, POSTs each chosen one until the receiver answers 2xx (retrying
with exponential backoff, for as long as it takes: at-least-once), and only then moves the
stored position past it. A process that stops (or is killed) resumes, or lets another replica
resume, from the last acknowledged event: an event is delivered again only if its POST was
answered but the position not yet saved, or the lease moved meanwhile, and then with the same
delivery id. Everything is read and written as the webhook's tenant (row-level security).

A POST never outlives the lease it was started under: before each attempt the lease is renewed
unless it has a whole POST deadline (RATION_NOTIFY_TIMEOUT_MS) and a margin left, and the
attempt is cancelled at the lease's end less the margin (a fence, measured from before the
renewal was sent, so it ends before the database's lease_until), so no second process starts
a delivery that is in flight. A stop cancels the POSTs in flight: their events are not
acknowledged and are delivered again later (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

from budget_service.adapters import webhooks
from budget_service.adapters.notify_metrics import NotifyMetrics
from budget_service.domain.alerts import AlertEvent, RetryBackoff, Webhook, alert, attempt_headers
from budget_service.domain.policy import Scope
from budget_service.domain.tenant_events import START, PollBackoff, Position, TenantEventFilter
from budget_service.store import notify_progress as store
from budget_service.usecases.notify_settings import NotifySettings
from budget_service.usecases.tenant_events import TenantEvent, read_page
from servicekit.db import Database
from servicekit.errors import DomainError
from servicekit.tenancy import for_tenant

log = logging.getLogger(__name__)

Post = Callable[[str, bytes, Mapping[str, str], float], Awaitable[int]]
FIRST_POLL_SECONDS = 0.02
# A stop gives each lease up within this long, or leaves it to expire (the database may hang).
RELEASE_SECONDS = 3.0


class LeaseLost(Exception):
    """Another process holds the webhook's lease now: stop delivering it."""


def holder_id() -> str:
    """This process, as it appears in budget.notify_progress.holder."""
    return f"{socket.gethostname()[:64]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def alert_event(tenant: str, item: TenantEvent) -> AlertEvent:
    run, pool, stored = item.run, item.pool, item.event
    if pool is not None:  # a pool's own event: its scope instead of a run
        scope = pool.ref.scope
        return AlertEvent(
            tenant=tenant,
            run_id="",
            seq=stored.seq,
            type=stored.type,
            payload_json=stored.payload_json,
            created_at=stored.created_at,
            project_id=pool.ref.scope_id if scope is Scope.PROJECT else "",
            workflow_id=pool.ref.scope_id if scope is Scope.WORKFLOW else "",
            agent_id=pool.ref.scope_id if scope is Scope.AGENT else "",
            pool_key=item.position.run_id,
            pool_scope=scope.value,
        )
    assert run is not None
    return AlertEvent(
        tenant=tenant,
        run_id=run.run_id,
        seq=stored.seq,
        type=stored.type,
        payload_json=stored.payload_json,
        created_at=stored.created_at,
        project_id=run.project_id,
        workflow_id=run.workflow_id,
        agent_id=run.agent_id,
    )


class Follower:
    """Delivers one webhook: claims its lease, then follows its tenant while it holds it."""

    def __init__(
        self,
        db: Database,
        webhook: Webhook,
        settings: NotifySettings,
        holder: str,
        post: Post,
        metrics: NotifyMetrics | None = None,
    ) -> None:
        self.webhook = webhook
        self._db = for_tenant(db, webhook.tenant)
        self._shared = db
        self._settings = settings
        self._holder = holder
        self._post = post
        self._metrics = metrics
        self._wanted = TenantEventFilter(webhook.event_types, (), webhook.project_ids)
        self._poll = PollBackoff(FIRST_POLL_SECONDS, settings.poll_seconds)
        self._retry = RetryBackoff(settings.retry_first_seconds, settings.retry_longest_seconds)
        self._renew_every = settings.lease_seconds / 3
        self._renew_due = 0.0
        # The lease's end by this clock: from before the query that took or renewed it was
        # sent, so never later than the database's lease_until. A POST ends a margin before.
        self._lease_end = 0.0
        self._margin = settings.lease_seconds / 10
        # While the lease is ours: where reading got to (every event before it acknowledged or
        # not chosen); stored at each delivery and with each renewal of the lease.
        self._position: Position | None = None
        # Lag: the wall time up to which every chosen event was delivered, and the creation
        # time of the event being delivered now (None between deliveries).
        self._caught_up_at = time.time()
        self._pending_since: float | None = None
        self.delivered = 0  # POSTs this process got a 2xx for

    @property
    def _log(self) -> dict[str, object]:
        return {"webhook": self.webhook.id, "tenant": self.webhook.tenant}

    @property
    def holding(self) -> bool:
        """Whether this process holds the webhook's lease (and so delivers it) now."""
        return self._position is not None

    def lag_seconds(self) -> float:
        """How far behind the tenant's stream this webhook's deliveries are: the age of the
        event being delivered, or the time since every chosen event was delivered; 0 while
        another process holds the lease (its lag is that process's to report)."""
        if not self.holding:
            return 0.0
        since = self._caught_up_at if self._pending_since is None else self._pending_since
        return max(time.time() - since, 0.0)

    async def run(self) -> None:
        """Until cancelled: hold the lease and deliver, or wait for it to come free."""
        failures = 0
        while True:
            try:
                if not await self._claim():
                    await asyncio.sleep(self._renew_every)
                    continue
                log.info("webhook lease taken", extra=self._log)
                failures = 0
                await self._follow()
            except LeaseLost:
                self._position = None
                log.warning("webhook lease lost to another process", extra=self._log)
            except DomainError as error:  # STORE_UNAVAILABLE / STORE_BUSY: retried
                self._position = None
                failures += 1
                extra = self._log | {"reason": error.reason}
                log.warning("notify cannot reach the database", extra=extra)
                await asyncio.sleep(self._retry.delay(failures))
            except Exception:  # anything else: logged, and this webhook tried again later
                self._position = None
                failures += 1
                log.exception("webhook follower failed", extra=self._log)
                await asyncio.sleep(self._retry.delay(failures))

    async def release(self) -> None:
        """Stores the position and gives the lease up, so another process takes over now."""
        if self._position is None:
            return
        with contextlib.suppress(LeaseLost):
            await self._save(0)
        self._position = None
        webhook, holder = self.webhook, self._holder
        await self._db.transaction(
            lambda conn: store.release(conn, webhook.tenant, webhook.id, holder)
        )

    async def _claim(self) -> bool:
        webhook, settings = self.webhook, self._settings
        start = START if settings.start == "earliest" else None  # None: the latest
        sent = time.monotonic()
        self._position = await self._db.transaction(
            lambda conn: store.claim(
                conn, webhook.tenant, webhook.id, self._holder, settings.lease_seconds, start
            )
        )
        self._renewed(sent)
        self._caught_up_at, self._pending_since = time.time(), None
        return self._position is not None

    def _renewed(self, sent: float) -> None:
        self._lease_end = sent + self._settings.lease_seconds
        self._renew_due = sent + self._renew_every

    async def _save(self, delivered: int) -> None:
        """Stores the position and renews the lease; LeaseLost when it is no longer ours."""
        webhook, settings, position = self.webhook, self._settings, self._position
        assert position is not None
        sent = time.monotonic()
        kept = await self._db.transaction(
            lambda conn: store.save(
                conn,
                webhook.tenant,
                webhook.id,
                self._holder,
                settings.lease_seconds,
                position,
                delivered,
            )
        )
        if not kept:
            raise LeaseLost()
        self._renewed(sent)

    async def _renew_if_due(self) -> None:
        if time.monotonic() >= self._renew_due:
            await self._save(0)

    async def _wait(self, seconds: float) -> None:
        """Sleeps, renewing the lease whenever it falls due meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, max(self._renew_due - time.monotonic(), 0.001)))
            await self._renew_if_due()

    async def _follow(self) -> None:
        tenant, delay = self.webhook.tenant, None
        while True:
            assert self._position is not None
            read_at = time.time()
            page = await read_page(self._shared, tenant, self._position, self._wanted)
            for item in page.events:
                event = alert_event(tenant, item)
                self._pending_since = event.created_at.timestamp()
                await self._deliver(event)
                self._position = item.position
                await self._save(1)
                self._pending_since = None
            # Past events this webhook does not want: stored with the next renewal (a
            # restart reads at most a renewal's worth of them again).
            self._position = max(self._position, page.reached)
            if not page.full:  # everything committed when the read began is delivered
                self._caught_up_at = read_at
            await self._renew_if_due()
            delay = 0.0 if page.full else self._poll.next(delay, bool(page.events))
            if delay:
                await self._wait(delay)

    async def _deadline(self) -> float:
        """The time this attempt may take: the POST deadline, and never past the lease's
        end less the margin (the lease is renewed first when that would cut the POST)."""
        timeout = self._settings.timeout_seconds
        if self._lease_end - time.monotonic() - self._margin < timeout:
            await self._save(0)
        left = self._lease_end - time.monotonic() - self._margin
        if left <= 0:  # the renewal itself took (nearly) the whole lease
            raise LeaseLost()
        return min(timeout, left)

    async def _deliver(self, event: AlertEvent) -> None:
        """POSTs until the receiver answers 2xx (at-least-once), renewing the lease."""
        webhook, metrics = self.webhook, self._metrics
        found = alert(webhook, event)
        failed = 0
        while True:
            await self._renew_if_due()
            deadline = await self._deadline()
            headers = attempt_headers(webhook, found, int(time.time()))
            if failed and metrics is not None:
                metrics.retried(webhook)
            try:
                status = await self._post(webhook.url, found.body, headers, deadline)
                outcome = f"HTTP {status}"
                if 200 <= status < 300:
                    self.delivered += 1
                    if metrics is not None:
                        metrics.delivered(webhook)
                    ids = {"delivery_id": found.delivery_id, "run_id": event.run_id}
                    log.info("webhook delivered", extra=self._log | ids | {"type": event.type})
                    return
            except webhooks.POST_ERRORS as error:
                outcome = type(error).__name__
                status = 0
            if metrics is not None:
                metrics.failed(webhook, status)
            failed += 1
            delay = self._retry.delay(failed)
            log.warning(
                "webhook delivery failed; retrying",
                extra=self._log
                | {
                    "delivery_id": found.delivery_id,
                    "attempt": failed,
                    "outcome": outcome,
                    "retry_in_seconds": delay,
                },
            )
            await self._wait(delay)


class Notifier:
    """Every configured webhook's follower, in one process; any number of these may run."""

    def __init__(
        self,
        db: Database,
        settings: NotifySettings,
        *,
        holder: str | None = None,
        post: Post | None = None,
        metrics: NotifyMetrics | None = None,
    ) -> None:
        self.holder = holder or holder_id()
        self._db = db
        self._settings = settings
        self._given_post = post
        self._metrics = metrics
        self.followers: list[Follower] = []

    async def run(self) -> None:
        """Until cancelled; then the POSTs in flight are cancelled (their events stay
        unacknowledged) and each follower's lease is given up, within RELEASE_SECONDS."""
        async with webhooks.Sender() as sender:
            post = self._given_post or sender.post
            self.followers = [
                Follower(self._db, w, self._settings, self.holder, post, self._metrics)
                for w in self._settings.webhooks
            ]
            if self._metrics is not None:
                self._metrics.follow(self.followers)
            tasks = [asyncio.ensure_future(f.run()) for f in self.followers]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self._release()

    async def _release(self) -> None:
        async def release(follower: Follower) -> None:
            with contextlib.suppress(Exception):  # the database may be gone
                await follower.release()

        released = asyncio.gather(*(release(f) for f in self.followers))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(released, RELEASE_SECONDS)
