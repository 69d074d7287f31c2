"""Server interceptors: metrics and access log, authentication, and domain errors → status."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from servicekit.auth import RoleTable, TokenTable, identity_var
from servicekit.cpu import deadline_of, deadline_var
from servicekit.errors import (
    DomainError,
    ErrorKind,
    FieldViolation,
    unimplemented,
    validation_error,
)
from servicekit.logs import set_request_id
from servicekit.metrics import GrpcMetrics, MethodMetrics
from servicekit.status import ErrorMapper

__all__ = [
    "AuthInterceptor",
    "ErrorInterceptor",
    "ErrorMapper",
    "MetricsInterceptor",
    "UnknownMethod",
]

log = logging.getLogger("ration.rpc")

# Health checks and reflection stay open: probes and tooling carry no tenant.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
INTERNAL_MESSAGE = "internal error"
UNDECODABLE_ERROR = validation_error(
    [FieldViolation("request", "is not a valid protobuf message of this method's request type")]
)


Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]


class _Undecodable:
    """Stands in for request bytes that are not a valid message of the method's type."""


UNDECODABLE = _Undecodable()


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """A deserializer that turns unparsable bytes into UNDECODABLE, which the error interceptor
    refuses as INVALID_ARGUMENT: a raising deserializer makes gRPC answer UNKNOWN, with the
    parser's message."""
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return UNDECODABLE

    return parse


def _wrap(
    handler: grpc.RpcMethodHandler,
    unary: Callable[[Behavior], Behavior],
    stream: Callable[[Behavior], Behavior],
    tolerant: bool = False,
) -> grpc.RpcMethodHandler:
    """Rebuilds a handler with its behavior wrapped; only unary and server-streaming are used.
    `tolerant` (the innermost, error interceptor) makes undecodable requests UNDECODABLE."""
    deserializer = handler.request_deserializer
    if tolerant:
        deserializer = _tolerant(deserializer)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            unary(handler.unary_unary),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            stream(handler.unary_stream),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class UnknownMethod(grpc.RpcMethodHandler):
    """The one handler of every path no service registered: UNIMPLEMENTED with ErrorInfo.

    Built once per server. It accepts any call shape (a stream of requests it never reads), so
    a made-up path costs the same whatever the caller sends, and interceptors pass it through
    untouched: no cache entry, no metric series, no authentication for a method that is not
    there.
    """

    request_streaming = True
    response_streaming = True
    request_deserializer = None
    response_serializer = None
    unary_unary = None
    unary_stream = None
    stream_unary = None

    def __init__(self, errors: ErrorMapper) -> None:
        async def answer(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await errors.abort(context, unimplemented())

        self.stream_stream = answer


class _CachingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each registered method's handler once and reuses it: per-call state (metadata,
    identity, timing) is read inside the wrapped behavior, so nothing is rebuilt per RPC.

    Only methods a service registered have a handler, so the cache holds at most one entry per
    registered method; unknown paths (any string a caller sends) are never keys.
    """

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, Any]] = {}

    @property
    def cached_methods(self) -> frozenset[str]:
        return frozenset(self._wrapped)

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None or isinstance(handler, UnknownMethod):
            return handler
        method = details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self.wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError


def _metadata(context: grpc.aio.ServicerContext, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return str(value)
    return None


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class _Series:
    """One method's metrics and access log line around each call."""

    def __init__(self, metrics: GrpcMetrics, kind: str, service: str, name: str) -> None:
        self.method = MethodMetrics(metrics, kind, service, name)

    def begin(self, context: grpc.aio.ServicerContext) -> float:
        set_request_id(_metadata(context, "x-request-id"))
        deadline_var.set(deadline_of(context))  # CPU work not started by then never starts
        self.method.started.inc()
        return time.perf_counter()

    def finish(self, context: grpc.aio.ServicerContext, start: float) -> None:
        elapsed = time.perf_counter() - start
        code = context.code() or grpc.StatusCode.OK
        code_name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        self.method.finished(code_name, elapsed)
        level = logging.DEBUG if code_name in ("OK", "CANCELLED") else logging.INFO
        if log.isEnabledFor(level):  # the extra fields are built only for lines written
            identity = identity_var.get(None)
            _, service, name = self.method.labels
            extra = {"method": name, "service": service, "code": code_name}
            extra["duration_ms"] = round(elapsed * 1000, 3)
            extra["tenant"] = identity.tenant if identity else None
            log.log(level, "rpc", extra=extra)


class MetricsInterceptor(_CachingInterceptor):
    """Counts and times every RPC by final code, and writes one access-log line per failure."""

    def __init__(self, metrics: GrpcMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, name = _split(method)
        m = self._metrics

        def unary(behavior: Behavior) -> Behavior:
            series = _Series(m, "unary", service, name)

            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                start = series.begin(context)
                try:
                    return await behavior(request, context)
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    series.finish(context, start)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            series = _Series(m, "server_stream", service, name)
            sent = m.msg_sent.labels(*series.method.labels)

            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                start = series.begin(context)
                try:
                    async for item in behavior(request, context):
                        sent.inc()
                        yield item
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    series.finish(context, start)

            return wrapped

        return _wrap(handler, unary, stream)


class AuthInterceptor(_CachingInterceptor):
    """Resolves the bearer token to an identity and enforces the method's required role (the
    table the service definition hands in) before the handler runs.

    A registered method without a row is refused to every caller (fail closed); the server
    also refuses to start with such a table (servicekit.auth.check_role_table).
    """

    def __init__(self, tokens: TokenTable, errors: ErrorMapper, roles: RoleTable) -> None:
        super().__init__()
        self._tokens = tokens
        self._errors = errors
        self._roles = roles

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if method.startswith(PUBLIC_PREFIXES):
            return handler
        tokens, errors = self._tokens, self._errors
        listed = method in self._roles
        role = self._roles.get(method)

        async def authenticate(context: grpc.aio.ServicerContext) -> None:
            try:
                authorization = None if tokens.dev_mode else _metadata(context, "authorization")
                identity = tokens.authenticate(authorization)
                identity_var.set(identity)
                if not listed:
                    raise unlisted_method()
                if role is not None:
                    identity.require(role)
            except DomainError as error:
                await errors.abort(context, error)

        def unary(behavior: Behavior) -> Behavior:
            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await authenticate(context)
                return await behavior(request, context)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                await authenticate(context)
                async for item in behavior(request, context):
                    yield item

            return wrapped

        return _wrap(handler, unary, stream)


def unlisted_method() -> DomainError:
    """A method the role table does not name: nobody may call it."""
    return DomainError(ErrorKind.FORBIDDEN, "ROLE_REQUIRED", "this call is not open to any role")


class ErrorInterceptor(_CachingInterceptor):
    """The only place exceptions become statuses; servicers contain no try/except. Innermost,
    it also answers paths no service registered (UnknownMethod), so every status carries
    ErrorInfo."""

    def __init__(self, errors: ErrorMapper) -> None:
        super().__init__()
        self._errors = errors
        self._unknown = UnknownMethod(errors)

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await super().intercept_service(continuation, details)
        return self._unknown if handler is None else handler

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        errors = self._errors

        async def fail(context: grpc.aio.ServicerContext, exc: Exception) -> None:
            if isinstance(exc, DomainError):
                await errors.abort(context, exc)
            if isinstance(exc, NotImplementedError):
                # The generated base servicer's answer for an RPC a service does not serve.
                await errors.abort(context, unimplemented())
            log.error("unhandled exception", exc_info=exc, extra={"rpc": method})
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

        def unary(behavior: Behavior) -> Behavior:
            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    if request is UNDECODABLE:
                        raise UNDECODABLE_ERROR
                    return await behavior(request, context)
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    await fail(context, exc)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                try:
                    if request is UNDECODABLE:
                        raise UNDECODABLE_ERROR
                    async for item in behavior(request, context):
                        yield item
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    await fail(context, exc)

            return wrapped

        return _wrap(handler, unary, stream, tolerant=True)
