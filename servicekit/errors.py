"""Domain errors shared by both services: a stable reason, a category, metadata and one detail.

Domain code raises these; only the error interceptor turns them into gRPC status, so no domain
module knows about transport codes (DESIGN.md section 11).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class ErrorKind(enum.Enum):
    """What went wrong, in domain terms; the interceptor maps each kind to one gRPC code."""

    INVALID = "invalid"  # INVALID_ARGUMENT
    UNAUTHENTICATED = "unauthenticated"  # UNAUTHENTICATED
    FORBIDDEN = "forbidden"  # PERMISSION_DENIED
    NOT_FOUND = "not_found"  # NOT_FOUND
    EXISTS = "exists"  # ALREADY_EXISTS
    EXHAUSTED = "exhausted"  # RESOURCE_EXHAUSTED
    PRECONDITION = "precondition"  # FAILED_PRECONDITION
    CONFLICT = "conflict"  # ABORTED
    UNAVAILABLE = "unavailable"  # UNAVAILABLE
    UNIMPLEMENTED = "unimplemented"  # UNIMPLEMENTED
    DEADLINE = "deadline"  # DEADLINE_EXCEEDED


@dataclass(frozen=True)
class FieldViolation:
    """One bad request field: a dotted path into the request and why it is wrong."""

    field: str
    description: str


@dataclass(frozen=True)
class BadRequestDetail:
    violations: tuple[FieldViolation, ...]


@dataclass(frozen=True)
class QuotaDetail:
    subject: str
    description: str


@dataclass(frozen=True)
class PreconditionDetail:
    type: str
    subject: str
    description: str


@dataclass(frozen=True)
class RetryDetail:
    delay_seconds: float


Detail = BadRequestDetail | QuotaDetail | PreconditionDetail | RetryDetail


@dataclass
class DomainError(Exception):
    """A condition the API documents: `reason` is the stable `ErrorInfo.reason`."""

    kind: ErrorKind
    reason: str
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    detail: Detail | None = None
    # Further typed details, after `detail` (e.g. RetryInfo beside a QuotaFailure).
    more: tuple[Detail, ...] = ()

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


# The status travels in trailing metadata, which gRPC clients cap (8 KiB soft, 16 KiB hard by
# default): past it the caller sees RESOURCE_EXHAUSTED instead of the refusal. A request with
# a thousand bad entries must still read as VALIDATION_FAILED, so the detail lists the first
# violations, each cut to a number of UTF-8 bytes, and counts the rest.
MAX_VIOLATIONS = 10
MAX_VIOLATION_BYTES = 100


def _listed(violations: Sequence[FieldViolation]) -> tuple[FieldViolation, ...]:
    def cut(text: str) -> str:
        data = text.encode()
        if len(data) <= MAX_VIOLATION_BYTES:
            return text
        return data[: MAX_VIOLATION_BYTES - 3].decode(errors="ignore") + "…"

    listed = [FieldViolation(cut(v.field), cut(v.description)) for v in violations[:MAX_VIOLATIONS]]
    if len(violations) > MAX_VIOLATIONS:
        more = len(violations) - MAX_VIOLATIONS
        listed.append(FieldViolation("request", f"{more} more violations not listed"))
    return tuple(listed)


def validation_error(violations: Sequence[FieldViolation]) -> DomainError:
    """The one way to refuse bad input: INVALID_ARGUMENT, VALIDATION_FAILED, BadRequest."""
    listed = _listed(violations)
    summary = "; ".join(f"{v.field}: {v.description}" for v in listed[:5])
    return DomainError(
        ErrorKind.INVALID,
        "VALIDATION_FAILED",
        f"invalid request: {summary}",
        detail=BadRequestDetail(listed),
    )


def unimplemented() -> DomainError:
    """A method this server does not serve (unknown path, or an RPC a service leaves out)."""
    return DomainError(ErrorKind.UNIMPLEMENTED, "UNIMPLEMENTED", "method not implemented")


def not_found(reason: str, message: str) -> DomainError:
    return DomainError(ErrorKind.NOT_FOUND, reason, message)


def store_unavailable(message: str = "the database is unavailable; retry") -> DomainError:
    """Postgres is unreachable (a connection failed) or a statement timed out."""
    return DomainError(ErrorKind.UNAVAILABLE, "STORE_UNAVAILABLE", message, detail=RetryDetail(0.2))


def store_busy(
    message: str = "every database connection stayed in use past what this call's deadline"
    " allows; nothing was done, retry",
) -> DomainError:
    """Postgres is healthy but this process could not get to it in time: its pool stayed full
    for as long as the call's deadline allowed (or conflicts kept aborting the transaction).
    Nothing was done."""
    return DomainError(ErrorKind.UNAVAILABLE, "STORE_BUSY", message, detail=RetryDetail(0.1))


def tenant_busy(share: int, retry_seconds: float) -> DomainError:
    """The caller's tenant holds its whole share of the CPU pool (servicekit/cpu.py)."""
    return DomainError(
        ErrorKind.EXHAUSTED,
        "TENANT_BUSY",
        f"this tenant already has {share} CPU jobs running or waiting; retry later",
        metadata={"limit": str(share)},
        detail=RetryDetail(retry_seconds),
    )


def tenant_connections_busy(share: int, retry_seconds: float) -> DomainError:
    """The caller's tenant held its whole share of the database pool (servicekit/db.py) for as
    long as the call's deadline allowed; nothing was done."""
    return DomainError(
        ErrorKind.EXHAUSTED,
        "TENANT_BUSY",
        f"this tenant already uses {share} database connections of this process; retry later",
        metadata={"limit": str(share)},
        detail=RetryDetail(retry_seconds),
    )


def deadline_exceeded() -> DomainError:
    """The call's deadline passed before its work started; nothing was done."""
    return DomainError(
        ErrorKind.DEADLINE,
        "DEADLINE_EXCEEDED",
        "the call's deadline passed before its work could start; nothing was done",
    )
