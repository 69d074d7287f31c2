"""Concurrent event streams (and reports) per tenant, capped so one tenant cannot hold them all."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from servicekit.errors import DomainError, ErrorKind, RetryDetail

# A refused caller retries after this long; a slot frees when any of its streams ends.
RETRY_SECONDS = 1.0


def too_many_streams(limit: int) -> DomainError:
    """TOO_MANY_STREAMS: the tenant already has `limit` streams open on this replica."""
    return DomainError(
        ErrorKind.EXHAUSTED,
        "TOO_MANY_STREAMS",
        f"this tenant already has {limit} event streams open; close one or retry later",
        metadata={"limit": str(limit)},
        detail=RetryDetail(RETRY_SECONDS),
    )


def too_many_reports(limit: int, where: str = "on this server process") -> DomainError:
    """TOO_MANY_REPORTS: the tenant already has `limit` ReportSpend calls running here (or,
    `where` says, report statements on the database, across replicas)."""
    return DomainError(
        ErrorKind.EXHAUSTED,
        "TOO_MANY_REPORTS",
        f"this tenant already has {limit} spend reports running {where}; retry later",
        metadata={"limit": str(limit)},
        detail=RetryDetail(RETRY_SECONDS),
    )


class StreamSlots:
    """Per-process counts of open streams (or running reports) by tenant. A stream holds its
    slot from before its first read until it ends, fails or is cancelled; one more than
    `per_tenant` is refused with `refuse(per_tenant)`."""

    def __init__(
        self, per_tenant: int, refuse: Callable[[int], DomainError] = too_many_streams
    ) -> None:
        self.per_tenant = per_tenant
        self._refuse = refuse
        self._open: dict[str, int] = {}

    def open_streams(self, tenant: str) -> int:
        return self._open.get(tenant, 0)

    @contextlib.contextmanager
    def slot(self, tenant: str) -> Iterator[None]:
        if self.open_streams(tenant) >= self.per_tenant:
            raise self._refuse(self.per_tenant)
        self._open[tenant] = self.open_streams(tenant) + 1
        try:
            yield
        finally:
            left = self._open[tenant] - 1
            if left:
                self._open[tenant] = left
            else:
                del self._open[tenant]
