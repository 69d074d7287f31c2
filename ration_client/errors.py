"""Typed exceptions decoded from a failed call's google.rpc.ErrorInfo reason and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import InvalidOperation
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from ration_client.views import Dimension, Quantity, Scope, nanos_to_usd, usd


class RationError(Exception):
    """Any documented failure: `reason` is the stable ErrorInfo.reason callers branch on."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        metadata: dict[str, str],
        details: list[Any],
    ) -> None:
        super().__init__(f"{reason or code.name}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata = metadata
        self.details = details

    @property
    def retryable(self) -> bool:
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED) or (
            self.reason in ("BUDGET_HELD", "TENANT_BUSY")
        )

    @property
    def retry_after(self) -> timedelta | None:
        """The server's RetryInfo delay; None when it sent none."""
        for detail in self.details:
            if isinstance(detail, error_details_pb2.RetryInfo):
                delay = detail.retry_delay
                return timedelta(seconds=delay.seconds, microseconds=delay.nanos // 1000)
        return None

    @property
    def retry_after_seconds(self) -> float:
        """The server's RetryInfo delay in seconds, or 1 s when it sent none."""
        delay = self.retry_after
        return 1.0 if delay is None else delay.total_seconds()

    def _integer(self, key: str) -> int | None:
        text = self.metadata.get(key, "")
        try:
            return int(text)
        except ValueError:
            return None


class _Limit(RationError):
    """A memory limit that was hit: its dimension, limit and observed value (integers)."""

    @property
    def dimension(self) -> str:
        return self.metadata.get("dimension", "")

    @property
    def limit(self) -> int | None:
        return self._integer("limit")

    @property
    def observed(self) -> int | None:
        return self._integer("observed")


class _BudgetAmounts(RationError):
    """A budget refusal about one dimension: amounts are Decimal USD for cost, ints otherwise
    (None when the server sent none)."""

    @property
    def dimension(self) -> Dimension | None:
        text = self.metadata.get("dimension", "")
        try:
            return Dimension(text)
        except ValueError:
            return None

    def _amount(self, key: str) -> Quantity | None:
        text = self.metadata.get(key, "")
        if not text:
            return None
        if self.dimension is Dimension.COST:
            try:  # the views' form: exact nanos, no trailing zeros, `0` rather than `0E-9`
                return nanos_to_usd(usd(text))
            except (InvalidOperation, ValueError):
                return None
        return self._integer(key)

    @property
    def limit(self) -> Quantity | None:
        return self._amount("limit")

    @property
    def scope(self) -> Scope | None:
        """The scope whose balance refused (the run, or a pool's scope), when the server named
        it."""
        try:
            return Scope(self.metadata.get("scope", ""))
        except ValueError:
            return None

    @property
    def scope_id(self) -> str:
        """The id of that scope (project, workflow or agent id); empty for the run itself."""
        return self.metadata.get("scopeId", "")


class BudgetExhausted(_BudgetAmounts):
    """The run (or a pool it draws on) has no budget left for this call: `dimension`, `limit`
    and `observed` (what the call would have reached), `scope`/`scope_id` of the balance and,
    for a windowed pool, `retry_after` (until its next window). All None on a run that had
    already failed."""

    @property
    def observed(self) -> Quantity | None:
        return self._amount("observed")


class _RetryLater(RationError):
    """Refused for now; the server's RetryInfo says when to try again."""


class TenantBusy(_RetryLater):
    """The tenant has its whole share of the server's CPU pool in use; nothing was done.
    Retry after `retry_after_seconds`."""

    @property
    def limit(self) -> int | None:
        return self._integer("limit")


class BudgetHeld(_BudgetAmounts, _RetryLater):
    """Open holds take the room this call needs; retry after `retry_after_seconds`. Amounts
    (`limit`, `consumed`, `held`, `requested`) are Decimal USD for cost, ints otherwise."""

    @property
    def consumed(self) -> Quantity | None:
        return self._amount("consumed")

    @property
    def held(self) -> Quantity | None:
        return self._amount("held")

    @property
    def requested(self) -> Quantity | None:
        return self._amount("requested")


class ModelDenied(RationError):
    @property
    def model(self) -> str:
        return self.metadata.get("model", "")

    @property
    def scope(self) -> Scope | None:
        """The scope whose model lists denied the model."""
        try:
            return Scope(self.metadata.get("scope", ""))
        except ValueError:
            return None

    @property
    def scope_id(self) -> str:
        return self.metadata.get("scopeId", "")


class RunInterrupted(RationError):
    """The run waits for ResumeRun (an approval) after a breach."""


class RunNotInterrupted(RationError):
    """ResumeRun approves only an INTERRUPTED run; metadata `state` says what it is instead."""


class RunClosed(RationError):
    pass


class RunFailed(RationError):
    pass


class ReservationSettled(RationError):
    @property
    def state(self) -> str:
        return self.metadata.get("state", "")


class NotFound(RationError):
    """RUN_NOT_FOUND, RESERVATION_NOT_FOUND, MEMORY_NOT_FOUND, ENTRY_NOT_FOUND, …"""


class RunExists(RationError):
    pass


class InvalidRequest(RationError):
    """VALIDATION_FAILED (with field violations) or REQUEST_ID_REUSED."""

    @property
    def violations(self) -> list[tuple[str, str]]:
        found = []
        for detail in self.details:
            if isinstance(detail, error_details_pb2.BadRequest):
                found += [(v.field, v.description) for v in detail.field_violations]
        return found


class Unauthenticated(RationError):
    pass


class PermissionDenied(RationError):
    pass


class CapacityExceeded(_Limit):
    """The memory write would exceed its capacity budget; nothing was written."""


class RevisionConflict(RationError):
    @property
    def expected(self) -> str:
        return self.metadata.get("expected", "")

    @property
    def actual(self) -> str:
        return self.metadata.get("actual", "")


class CompactionDisabled(RationError):
    pass


class RelevanceUnavailable(RationError):
    pass


class HistoryWindowExceeded(RationError):
    pass


class TooManyReports(_RetryLater):
    """The tenant runs as many spend reports at once as the server allows (`limit`); retry
    after `retry_after_seconds`."""

    @property
    def limit(self) -> int | None:
        return self._integer("limit")


class TooManyStreams(_RetryLater):
    """The tenant holds as many event streams as the server allows (`limit`); retry after
    `retry_after_seconds`, or close a stream."""

    @property
    def limit(self) -> int | None:
        return self._integer("limit")


class Unavailable(RationError):
    """The service or its database is unreachable (fails closed); safe to retry."""


class StoreBusy(Unavailable):
    """STORE_BUSY: the database is up but the server's connections stayed in use for as long
    as the call's deadline allowed; nothing was done. Retryable like any UNAVAILABLE (the
    client retries it with the same request_id), after `retry_after_seconds`; a longer
    deadline lets the server wait longer."""


BY_REASON: dict[str, type[RationError]] = {
    "BUDGET_EXHAUSTED": BudgetExhausted,
    "BUDGET_HELD": BudgetHeld,
    "BUDGET_MODEL_DENIED": ModelDenied,
    "RUN_INTERRUPTED": RunInterrupted,
    "RUN_NOT_INTERRUPTED": RunNotInterrupted,
    "RUN_CLOSED": RunClosed,
    "RUN_FAILED": RunFailed,
    "RESERVATION_SETTLED": ReservationSettled,
    "RUN_NOT_FOUND": NotFound,
    "RESERVATION_NOT_FOUND": NotFound,
    "SCOPE_BUDGET_NOT_FOUND": NotFound,
    "MEMORY_NOT_FOUND": NotFound,
    "ENTRY_NOT_FOUND": NotFound,
    "REVISION_NOT_FOUND": NotFound,
    "RUN_EXISTS": RunExists,
    "VALIDATION_FAILED": InvalidRequest,
    "REQUEST_ID_REUSED": InvalidRequest,
    "UNAUTHENTICATED": Unauthenticated,
    "ROLE_REQUIRED": PermissionDenied,
    "MEMORY_CAPACITY_EXCEEDED": CapacityExceeded,
    "REVISION_CONFLICT": RevisionConflict,
    "COMPACTION_DISABLED": CompactionDisabled,
    "RELEVANCE_UNAVAILABLE": RelevanceUnavailable,
    "HISTORY_WINDOW_EXCEEDED": HistoryWindowExceeded,
    "STORE_UNAVAILABLE": Unavailable,
    "STORE_BUSY": StoreBusy,
    "TOO_MANY_STREAMS": TooManyStreams,
    "TOO_MANY_REPORTS": TooManyReports,
    "TENANT_BUSY": TenantBusy,
}

_DETAIL_KINDS = (
    error_details_pb2.BadRequest,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RetryInfo,
)


@dataclass(frozen=True)
class StatusDetails:
    """What a failed call's google.rpc.Status carries: its ErrorInfo and its typed details."""

    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    details: list[Any] = field(default_factory=list)


def status_details(error: grpc.aio.AioRpcError) -> StatusDetails:
    """The one decoder of `grpc-status-details-bin` (empty when the trailer is absent)."""
    reason, domain, metadata, details = "", "", {}, []
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for packed in status.details:
            info = error_details_pb2.ErrorInfo()
            if packed.Unpack(info):
                reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
                continue
            for kind in _DETAIL_KINDS:
                message = kind()
                if packed.Unpack(message):
                    details.append(message)
    return StatusDetails(reason, domain, metadata, details)


def decode(error: grpc.aio.AioRpcError) -> RationError:
    """Maps a failed call to the exception class of its reason (or of its code)."""
    found = status_details(error)
    reason, metadata, details = found.reason, found.metadata, found.details
    code = error.code()
    cls = BY_REASON.get(reason)
    if cls is None:
        cls = {
            grpc.StatusCode.UNAVAILABLE: Unavailable,
            grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
            grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
            grpc.StatusCode.NOT_FOUND: NotFound,
            grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
        }.get(code, RationError)
    return cls(code, reason, error.details() or "", metadata, details)
