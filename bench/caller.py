"""One simulated caller's view: time each RPC, record it inside the measured window."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from bench import tenants
from bench.stats import Histogram
from ration_client.errors import decode, status_details

T = TypeVar("T")

# Answers that mean "this RPC or feature does not exist here": the figure is not available.
UNAVAILABLE_REASONS = frozenset({"RELEVANCE_UNAVAILABLE"})
# A tenant over its share gets RESOURCE_EXHAUSTED with a RetryInfo; callers wait that long (at
# most MAX_BACKOFF, DEFAULT_BACKOFF without one), as a client that honours it does.
DEFAULT_BACKOFF = 0.05
MAX_BACKOFF = 1.0


def error_reason(error: grpc.aio.AioRpcError) -> str:
    """`ErrorInfo.reason` from the rich status in the trailers, or an empty string."""
    return status_details(error).reason


def describe(error: grpc.aio.AioRpcError) -> str:
    """`CODE REASON` (reason omitted when absent): the key errors are counted under."""
    reason = error_reason(error)
    return f"{error.code().name} {reason}".strip()


def unavailable(error: grpc.aio.AioRpcError) -> str | None:
    """The reason a figure cannot be measured on this server, or None for an ordinary error."""
    code = error.code()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return f"UNIMPLEMENTED ({error.details() or 'no details'})"
    reason = error_reason(error)
    if code == grpc.StatusCode.FAILED_PRECONDITION and reason in UNAVAILABLE_REASONS:
        return f"FAILED_PRECONDITION {reason}"
    return None


def backoff(error: grpc.aio.AioRpcError) -> float | None:
    """Seconds to wait before the caller's next call when the server refused to admit this one
    (RESOURCE_EXHAUSTED), or None for any other error."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    delay = decode(error).retry_after
    seconds = DEFAULT_BACKOFF if delay is None else delay.total_seconds()
    return min(max(seconds, 0.0), MAX_BACKOFF)


def auth(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The call metadata of the scenario's `tenant` (bench/tenants.py), or None (no auth)."""
    tenant = params.get("tenant")
    return tenants.metadata(str(tenant)) if tenant else None


@dataclass
class Tally:
    """What one load process measured; merged by the parent."""

    ops: Histogram = field(default_factory=Histogram)
    rpcs: Histogram = field(default_factory=Histogram)
    methods: dict[str, Histogram] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    unavailable: str | None = None
    failure: str | None = None
    # Completions inside the measured window (rates), whenever the operation started.
    window_ops: int = 0
    window_rpcs: int = 0
    last_in_window: float = 0.0
    # Seconds from the window's start to its last completion: the divisor of the rates.
    elapsed: float = 0.0

    def completed(self, done: float, window: tuple[float, float], rpcs: bool) -> None:
        if window[0] <= done <= window[1]:
            if rpcs:
                self.window_rpcs += 1
            else:
                self.window_ops += 1
            self.last_in_window = max(self.last_in_window, done)


@dataclass
class Caller:
    """Passed to every operation: its index, a per-RPC deadline and the timed `rpc` wrapper."""

    index: int
    tally: Tally
    timeout: float
    window: tuple[float, float] = (0.0, 0.0)
    # Set per operation: latencies count for operations that start inside the window.
    recording: bool = False

    async def rpc(self, method: str, call: Awaitable[T]) -> T:
        start = time.monotonic()
        result = await call
        done = time.monotonic()
        if self.recording:
            self.tally.rpcs.record(done - start)
            self.tally.methods.setdefault(method, Histogram()).record(done - start)
        self.tally.completed(done, self.window, rpcs=True)
        return result


Op = Callable[[Caller], Awaitable[None]]


def unary(channel: grpc.aio.Channel, path: str, response: type[Message]) -> Any:
    """A raw unary multicallable for `/package.Service/Method` (no generated stub needed)."""
    return channel.unary_unary(
        path, request_serializer=_serialize, response_deserializer=response.FromString
    )


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
