"""The server interceptor: metrics and access log, authentication, and domain errors → status."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from servicekit.auth import RoleTable, TokenTable, UnknownToken, identity_var
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
    "CallInterceptor",
    "ErrorMapper",
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
    """A deserializer that turns unparsable bytes into UNDECODABLE, which the interceptor's error
    step refuses as INVALID_ARGUMENT: a raising deserializer makes gRPC answer UNKNOWN, with the
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
) -> grpc.RpcMethodHandler:
    """Rebuilds a handler with its behavior wrapped; only unary and server-streaming are used.
    Undecodable requests arrive as UNDECODABLE."""
    deserializer = _tolerant(handler.request_deserializer)
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


def _call_metadata(context: grpc.aio.ServicerContext) -> tuple[str | None, str | None]:
    """The call's x-request-id and authorization (the first of each), read in one pass:
    gRPC builds the metadata tuple anew on every invocation_metadata()."""
    request_id = authorization = None
    for name, value in context.invocation_metadata() or ():
        if name == "x-request-id":
            if request_id is None:
                request_id = str(value)
        elif name == "authorization" and authorization is None:
            authorization = str(value)
    return request_id, authorization


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class _Series:
    """One method's metrics and access log line around each call."""

    def __init__(self, metrics: GrpcMetrics, kind: str, service: str, name: str) -> None:
        self.method = MethodMetrics(metrics, kind, service, name)

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


class CallInterceptor(grpc.aio.ServerInterceptor):
    """Everything servicekit does around an RPC, as one layer, in this order:

    1. metrics and access log: counts and times every RPC by final code, writes one log line
       per failure; sets the call's request id and deadline (servicekit.logs, servicekit.cpu);
    2. authentication: resolves the bearer token to an identity and enforces the method's
       required role (the table the service definition hands in) before the handler runs. A
       registered method without a row is refused to every caller (fail closed); the server
       also refuses to start with such a table (servicekit.auth.check_role_table). Health and
       reflection stay open;
    3. errors: the only place exceptions become statuses (servicers contain no try/except),
       undecodable requests included. It also answers paths no service registered
       (UnknownMethod), so every status carries ErrorInfo.

    Each registered method's handler is wrapped once and reused: per-call state (metadata,
    identity, timing) is read inside the wrapped behavior, the metadata in one pass, so
    nothing is rebuilt per RPC and gRPC runs one interceptor, not one per concern. Only methods
    a service registered have a handler, so the cache holds at most one entry per registered
    method; unknown paths (any string a caller sends) are never keys, and get no metric
    series and no authentication.
    """

    def __init__(
        self, metrics: GrpcMetrics, tokens: TokenTable, errors: ErrorMapper, roles: RoleTable
    ) -> None:
        self._metrics = metrics
        self._tokens = tokens
        self._errors = errors
        self._roles = roles
        self._unknown = UnknownMethod(errors)
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    @property
    def cached_methods(self) -> frozenset[str]:
        return frozenset(self._wrapped)

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return self._unknown
        if isinstance(handler, UnknownMethod):
            return handler
        method = details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _guard(self, method: str) -> Callable[[grpc.aio.ServicerContext, str | None], Any] | None:
        """The method's authentication and role check, or None for an open method."""
        if method.startswith(PUBLIC_PREFIXES):
            return None
        tokens, errors = self._tokens, self._errors
        dev_mode = tokens.dev_mode
        listed = method in self._roles
        role = self._roles.get(method)

        async def authenticate(
            context: grpc.aio.ServicerContext, authorization: str | None
        ) -> None:
            try:
                try:
                    identity = tokens.authenticate(None if dev_mode else authorization)
                except UnknownToken as unknown:  # maybe a key issued since the cache's refresh
                    identity = await tokens.fetch_issued(unknown)
                identity_var.set(identity)
                if not listed:
                    raise unlisted_method()
                if role is not None:
                    identity.require(role)
            except DomainError as error:
                await errors.abort(context, error)

        return authenticate

    def _fail(self, method: str) -> Callable[[grpc.aio.ServicerContext, Exception], Any]:
        errors = self._errors

        async def fail(context: grpc.aio.ServicerContext, exc: Exception) -> None:
            if isinstance(exc, DomainError):
                await errors.abort(context, exc)
            if isinstance(exc, NotImplementedError):
                # The generated base servicer's answer for an RPC a service does not serve.
                await errors.abort(context, unimplemented())
            log.error("unhandled exception", exc_info=exc, extra={"rpc": method})
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

        return fail

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, name = _split(method)
        metrics = self._metrics
        guard = self._guard(method)
        fail = self._fail(method)

        def begin(context: grpc.aio.ServicerContext, series: _Series) -> str | None:
            """Starts the call's series, request id and deadline; returns its authorization."""
            request_id, authorization = _call_metadata(context)
            set_request_id(request_id)
            deadline_var.set(deadline_of(context))  # CPU work not started by then never starts
            series.method.started.inc()
            return authorization

        def unary(behavior: Behavior) -> Behavior:
            series = _Series(metrics, "unary", service, name)

            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                authorization = begin(context, series)
                start = time.perf_counter()
                try:
                    if guard is not None:
                        await guard(context, authorization)
                    try:
                        if request is UNDECODABLE:
                            raise UNDECODABLE_ERROR
                        return await behavior(request, context)
                    except grpc.aio.AbortError:
                        raise
                    except Exception as exc:
                        await fail(context, exc)
                        return None
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    series.finish(context, start)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            series = _Series(metrics, "server_stream", service, name)
            sent = metrics.msg_sent.labels(*series.method.labels)

            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                authorization = begin(context, series)
                start = time.perf_counter()
                try:
                    if guard is not None:
                        await guard(context, authorization)
                    try:
                        if request is UNDECODABLE:
                            raise UNDECODABLE_ERROR
                        async for item in behavior(request, context):
                            sent.inc()
                            yield item
                    except grpc.aio.AbortError:
                        raise
                    except Exception as exc:
                        await fail(context, exc)
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    series.finish(context, start)

            return wrapped

        return _wrap(handler, unary, stream)


def unlisted_method() -> DomainError:
    """A method the role table does not name: nobody may call it."""
    return DomainError(ErrorKind.FORBIDDEN, "ROLE_REQUIRED", "this call is not open to any role")
