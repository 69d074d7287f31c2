"""A failed call's status for assertions, decoded by ration_client's one decoder."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from ration_client.errors import status_details

DetailT = TypeVar("DetailT")


@dataclass
class RpcErrorDetails:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    details: list[Any] = field(default_factory=list)

    def detail(self, kind: type[DetailT]) -> DetailT | None:
        found = [d for d in self.details if isinstance(d, kind)]
        return found[0] if found else None

    def require(self, kind: type[DetailT]) -> DetailT:
        """The detail of type `kind`, which the status must carry."""
        found = self.detail(kind)
        assert found is not None, f"no {kind.__name__} among {self.details}"
        return found


def decode(error: grpc.aio.AioRpcError) -> RpcErrorDetails:
    found = status_details(error)
    return RpcErrorDetails(
        error.code(),
        error.details() or "",
        found.reason,
        found.domain,
        dict(found.metadata),
        list(found.details),
    )


async def rpc_error(call: Awaitable[Any]) -> RpcErrorDetails:
    """The decoded status of a call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return decode(error)
    raise AssertionError("the call succeeded but should have failed")
