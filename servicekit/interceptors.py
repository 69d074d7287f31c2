"""Server interceptors: metrics and access log, authentication, and domain errors → status."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from servicekit.auth import TokenTable, identity_var
from servicekit.errors import (
    BadRequestDetail,
    DomainError,
    ErrorKind,
    PreconditionDetail,
    QuotaDetail,
    RetryDetail,
)
from servicekit.logs import request_id_var
from servicekit.metrics import GrpcMetrics

log = logging.getLogger("ration.rpc")

# Health checks and reflection stay open: probes and tooling carry no tenant.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
INTERNAL_MESSAGE = "internal error"

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
}

Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]


def _wrap(
    handler: grpc.RpcMethodHandler | None,
    unary: Callable[[Behavior], Behavior],
    stream: Callable[[Behavior], Behavior],
) -> grpc.RpcMethodHandler | None:
    """Rebuilds a handler with its behavior wrapped; only unary and server-streaming are used."""
    if handler is None:
        return None
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            unary(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            stream(handler.unary_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC by final code, and writes one access-log line per failure."""

    def __init__(self, metrics: GrpcMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        service, name = _split(details.method)
        metadata = dict(details.invocation_metadata or ())
        incoming_id = metadata.get("x-request-id")
        m = self._metrics

        def begin(kind: str) -> tuple[tuple[str, str, str], float]:
            request_id_var.set(str(incoming_id) if incoming_id else uuid.uuid4().hex)
            labels = (kind, service, name)
            m.started.labels(*labels).inc()
            return labels, time.perf_counter()

        def finish(
            labels: tuple[str, str, str], start: float, context: grpc.aio.ServicerContext
        ) -> None:
            elapsed = time.perf_counter() - start
            code = context.code() or grpc.StatusCode.OK
            code_name = code.name if isinstance(code, grpc.StatusCode) else str(code)
            m.handled.labels(*labels, code_name).inc()
            m.handling_seconds.labels(*labels).observe(elapsed)
            identity = identity_var.get(None)
            level = logging.DEBUG if code_name in ("OK", "CANCELLED") else logging.INFO
            log.log(
                level,
                "rpc",
                extra={
                    "method": name,
                    "service": service,
                    "code": code_name,
                    "duration_ms": round(elapsed * 1000, 3),
                    "tenant": identity.tenant if identity else None,
                },
            )

        def unary(behavior: Behavior) -> Behavior:
            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                labels, start = begin("unary")
                try:
                    return await behavior(request, context)
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    finish(labels, start, context)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                labels, start = begin("server_stream")
                try:
                    async for item in behavior(request, context):
                        m.msg_sent.labels(*labels).inc()
                        yield item
                except BaseException:
                    if context.code() is None:
                        context.set_code(grpc.StatusCode.CANCELLED)
                    raise
                finally:
                    finish(labels, start, context)

            return wrapped

        return _wrap(handler, unary, stream)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Resolves the bearer token to an identity before the handler runs."""

    def __init__(self, tokens: TokenTable, errors: ErrorMapper) -> None:
        self._tokens = tokens
        self._errors = errors

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if details.method.startswith(PUBLIC_PREFIXES):
            return handler
        metadata = dict(details.invocation_metadata or ())
        authorization = metadata.get("authorization")
        tokens, errors = self._tokens, self._errors

        def unary(behavior: Behavior) -> Behavior:
            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    identity_var.set(tokens.authenticate(authorization))
                except DomainError as error:
                    await errors.abort(context, error)
                return await behavior(request, context)

            return wrapped

        def stream(behavior: Behavior) -> Behavior:
            async def wrapped(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                try:
                    identity_var.set(tokens.authenticate(authorization))
                except DomainError as error:
                    await errors.abort(context, error)
                async for item in behavior(request, context):
                    yield item

            return wrapped

        return _wrap(handler, unary, stream)


class ErrorMapper:
    """DomainError → gRPC status + google.rpc.ErrorInfo + at most one typed detail."""

    def __init__(self, domain: str) -> None:
        self.domain = domain

    def status(self, error: DomainError) -> tuple[grpc.StatusCode, status_pb2.Status]:
        code = _CODES[error.kind]
        info = error_details_pb2.ErrorInfo(
            reason=error.reason, domain=self.domain, metadata=dict(error.metadata)
        )
        details = [_pack(info)]
        typed = _detail(error.detail)
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


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """The only place exceptions become statuses; servicers contain no try/except."""

    def __init__(self, errors: ErrorMapper) -> None:
        self._errors = errors

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        errors = self._errors
        method = details.method

        async def fail(context: grpc.aio.ServicerContext, exc: Exception) -> None:
            if isinstance(exc, DomainError):
                await errors.abort(context, exc)
            if isinstance(exc, NotImplementedError):
                # The generated base servicer's answer for an RPC a service does not serve.
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, "method not implemented")
            log.error("unhandled exception", exc_info=exc, extra={"rpc": method})
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

        def unary(behavior: Behavior) -> Behavior:
            async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
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
                    async for item in behavior(request, context):
                        yield item
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    await fail(context, exc)

            return wrapped

        return _wrap(handler, unary, stream)
