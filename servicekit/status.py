"""Domain errors as gRPC statuses: code, google.rpc.ErrorInfo and at most one typed detail."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from servicekit.errors import (
    BadRequestDetail,
    DomainError,
    ErrorKind,
    PreconditionDetail,
    QuotaDetail,
    RetryDetail,
)

_CODES: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.CONFLICT: grpc.StatusCode.ABORTED,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.DEADLINE: grpc.StatusCode.DEADLINE_EXCEEDED,
}


class ErrorMapper:
    """DomainError → gRPC status + google.rpc.ErrorInfo + its typed details."""

    def __init__(self, domain: str) -> None:
        self.domain = domain

    def status(self, error: DomainError) -> tuple[grpc.StatusCode, status_pb2.Status]:
        code = _CODES[error.kind]
        info = error_details_pb2.ErrorInfo(
            reason=error.reason, domain=self.domain, metadata=dict(error.metadata)
        )
        details = [_pack(info)]
        for detail in (error.detail, *error.more):
            typed = _detail(detail)
            if typed is not None:
                details.append(_pack(typed))
        status = status_pb2.Status(
            code=getattr(code_pb2, code.name), message=error.message, details=details
        )
        return code, status

    async def abort(self, context: grpc.aio.ServicerContext, error: DomainError) -> None:
        code, status = self.status(error)
        await context.abort(
            code,
            status.message,
            trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
        )


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _detail(detail: object) -> Any:
    if isinstance(detail, BadRequestDetail):
        return error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in detail.violations
            ]
        )
    if isinstance(detail, QuotaDetail):
        return error_details_pb2.QuotaFailure(
            violations=[
                error_details_pb2.QuotaFailure.Violation(
                    subject=detail.subject, description=detail.description
                )
            ]
        )
    if isinstance(detail, PreconditionDetail):
        return error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(
                    type=detail.type, subject=detail.subject, description=detail.description
                )
            ]
        )
    if isinstance(detail, RetryDetail):
        seconds = int(detail.delay_seconds)
        nanos = int(round((detail.delay_seconds - seconds) * 1e9))
        return error_details_pb2.RetryInfo(
            retry_delay=duration_pb2.Duration(seconds=seconds, nanos=nanos)
        )
    return None
