"""Calls with a deadline, bearer token and retries on UNAVAILABLE only (same request, same id)."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import uuid
from typing import Any, Self

import grpc

from ration_client.errors import decode


def new_request_id() -> str:
    """A UUIDv7 (time-ordered, so stored ids cluster by time in the server's index)."""
    millis = time.time_ns() // 1_000_000
    value = (millis & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


class Caller:
    """Shared by both clients: one channel, one token, one retry policy."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None,
        timeout: float,
        attempts: int = 4,
        backoff: float = 0.05,
        interceptors: list[Any] | None = None,
    ) -> None:
        self.channel = grpc.aio.insecure_channel(address, interceptors=interceptors)
        token = token if token is not None else os.environ.get("RATION_TOKEN")
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff

    async def unary(
        self,
        method: Any,
        request: Any,
        *,
        deadline: float | None = None,
        authorization: str | None = None,
    ) -> Any:
        """Retries only UNAVAILABLE, re-sending the identical request (so the same request_id):
        the server replays a stored response instead of applying the effect twice.
        `authorization` replaces the client's token with a header received from a caller (a
        service calling on that caller's behalf)."""
        metadata = (("authorization", authorization),) if authorization else self.metadata
        for attempt in range(self.attempts):
            try:
                return await method(request, timeout=deadline or self.timeout, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                retry = error.code() == grpc.StatusCode.UNAVAILABLE and attempt + 1 < self.attempts
                if not retry:
                    raise decode(error) from None
                await asyncio.sleep(self.backoff * (2**attempt))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.channel.close()


class Client:
    """What both clients share: address from the environment, one Caller, async context."""

    ADDRESS_VARIABLE = ""
    DEFAULT_ADDRESS = ""

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 5.0,
        interceptors: list[Any] | None = None,
        attempts: int = 4,
    ) -> None:
        address = address or os.environ.get(self.ADDRESS_VARIABLE, self.DEFAULT_ADDRESS)
        self._rpc = Caller(
            address, token=token, timeout=timeout, interceptors=interceptors, attempts=attempts
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_ready(self) -> None:
        """Waits until the channel is connected (after an outage, before a replay); bound it
        with `asyncio.timeout` as needed."""
        await self._rpc.channel.channel_ready()

    async def close(self) -> None:
        await self._rpc.close()
