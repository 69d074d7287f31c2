"""Decoding google.rpc status details from a failed call, for assertions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2


@dataclass
class RpcErrorDetails:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    details: list[Any] = field(default_factory=list)

    def detail(self, kind: type) -> Any:
        found = [d for d in self.details if isinstance(d, kind)]
        return found[0] if found else None


_KINDS = (
    error_details_pb2.BadRequest,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RetryInfo,
)


def decode(error: grpc.aio.AioRpcError) -> RpcErrorDetails:
    result = RpcErrorDetails(error.code(), error.details() or "")
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for packed in status.details:
            info = error_details_pb2.ErrorInfo()
            if packed.Unpack(info):
                result.reason, result.domain = info.reason, info.domain
                result.metadata = dict(info.metadata)
                continue
            for kind in _KINDS:
                message = kind()
                if packed.Unpack(message):
                    result.details.append(message)
    return result
