"""servicekit's server wiring on a real gRPC server: auth, error mapping, metrics, health."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from servicekit.auth import current_identity
from servicekit.db import Database
from servicekit.errors import DomainError, ErrorKind, QuotaDetail
from servicekit.server import ServiceApp, ServiceRunner
from servicekit.settings import DatabaseSettings, Env, ServerSettings
from tests.support.errors import decode
from tests.support.token_files import write_token_file

SERVICE = "ration.test.v1.Probe"


def probe_app(database: Database, registry: CollectorRegistry) -> ServiceApp:
    """A tiny service whose handlers expose what servicekit hands them."""

    async def whoami(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        identity = current_identity()
        return json.dumps({"tenant": identity.tenant, "roles": sorted(identity.roles)}).encode()

    async def domain_error(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise DomainError(
            ErrorKind.EXHAUSTED,
            "BUDGET_EXHAUSTED",
            "the run's cost budget is exhausted",
            metadata={"dimension": "cost", "limit": "1.0", "observed": "1.02"},
            detail=QuotaDetail("cost", "limit 1.0"),
        )

    async def crash(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("secret internals: password=hunter2")

    async def unimplemented(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise NotImplementedError("what generated base servicers raise")

    def handler(fn: Callable[..., object]) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(fn)

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE,
                    {
                        "WhoAmI": handler(whoami),
                        "DomainError": handler(domain_error),
                        "Crash": handler(crash),
                        "Unimplemented": handler(unimplemented),
                    },
                ),
            )
        )

    methods = ("WhoAmI", "DomainError", "Crash", "Unimplemented")
    roles = {f"/{SERVICE}/{name}": None for name in methods}
    return ServiceApp("probe", SERVICE, "ration.test.v1", [], register, roles=roles)


async def start_probe(database_url: str, wait: bool = True, **env: str) -> ServiceRunner:
    values = {
        "RATION_PROBE_LISTEN": "127.0.0.1:0",
        "RATION_PROBE_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_HEALTH_PROBE_MS": "100",
        "RATION_SHUTDOWN_GRACE_MS": "100",
        **env,
    }
    server = ServerSettings.from_env(Env(values), "probe", 0, 0)
    runner = ServiceRunner(
        probe_app, server, Database(database_url, DatabaseSettings.from_env(Env(values)))
    )
    await runner.start()
    if wait:
        await asyncio.wait_for(runner.ready.wait(), timeout=30)
    return runner


@pytest.fixture
async def probe(database_url: str) -> AsyncIterator[tuple[ServiceRunner, grpc.aio.Channel]]:
    runner = await start_probe(database_url)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield runner, channel
    await runner.stop()


def call(channel: grpc.aio.Channel, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(f"/{SERVICE}/{method}")


async def test_dev_mode_caller_is_the_dev_tenant(
    probe: tuple[ServiceRunner, grpc.aio.Channel],
) -> None:
    _, channel = probe
    answer = json.loads(await call(channel, "WhoAmI")(b""))
    assert answer == {"tenant": "dev", "roles": ["admin", "approver", "reader", "writer"]}


async def test_domain_error_reaches_client_with_code_reason_and_detail(
    probe: tuple[ServiceRunner, grpc.aio.Channel],
) -> None:
    from google.rpc import error_details_pb2

    _, channel = probe
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(channel, "DomainError")(b"")
    error = decode(caught.value)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.reason == "BUDGET_EXHAUSTED"
    assert error.domain == "ration.test.v1"
    assert error.metadata == {"dimension": "cost", "limit": "1.0", "observed": "1.02"}
    assert len(error.details) == 1
    assert error.require(error_details_pb2.QuotaFailure).violations[0].subject == "cost"


async def test_unexpected_exception_is_internal_with_fixed_message_only(
    probe: tuple[ServiceRunner, grpc.aio.Channel],
) -> None:
    _, channel = probe
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(channel, "Crash")(b"")
    error = decode(caught.value)
    assert error.code == grpc.StatusCode.INTERNAL
    assert error.message == "internal error"
    assert error.reason == ""
    assert error.details == []
    assert "hunter2" not in str(caught.value)


async def test_metrics_count_calls_by_code(probe: tuple[ServiceRunner, grpc.aio.Channel]) -> None:
    runner, channel = probe
    await call(channel, "WhoAmI")(b"")
    await call(channel, "WhoAmI")(b"")
    with pytest.raises(grpc.aio.AioRpcError):
        await call(channel, "DomainError")(b"")
    url = f"http://127.0.0.1:{runner.metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    labels = f'grpc_method="WhoAmI",grpc_service="{SERVICE}",grpc_type="unary"'
    assert f'grpc_server_handled_total{{grpc_code="OK",{labels}}} 2.0' in text
    exhausted = f'grpc_code="RESOURCE_EXHAUSTED",grpc_method="DomainError",grpc_service="{SERVICE}"'
    assert f"grpc_server_handled_total{{{exhausted}" in text
    assert f"grpc_server_started_total{{{labels}}} 2.0" in text
    assert "grpc_server_handling_seconds_bucket" in text


async def test_health_is_serving_when_postgres_answers_and_not_serving_after_stop(
    database_url: str,
) -> None:
    runner = await start_probe(database_url)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await runner.health.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    await runner.stop()
    assert (
        await runner.health.Check(health_pb2.HealthCheckRequest(service=SERVICE), None)
    ).status == (health_pb2.HealthCheckResponse.NOT_SERVING)


async def test_health_is_not_serving_until_postgres_answers() -> None:
    # Nothing listens on port 1: the server starts, reports NOT_SERVING, and keeps retrying.
    runner = await start_probe("postgresql://postgres@127.0.0.1:1/none", wait=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await runner.stop()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json",
        ("alpha-token", "alpha", ["writer"]),
        ("beta-token", "beta", ["admin"]),
    )


async def test_auth_maps_token_to_tenant_and_refuses_missing_or_unknown(
    app_database_url: str, token_file: Path
) -> None:
    # With tokens (not development mode) a service refuses a superuser role: the application's.
    runner = await start_probe(app_database_url, RATION_TOKEN_FILE=str(token_file))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
            whoami = call(channel, "WhoAmI")
            alpha = json.loads(
                await whoami(b"", metadata=(("authorization", "Bearer alpha-token"),))
            )
            assert alpha == {"tenant": "alpha", "roles": ["writer"]}
            beta = json.loads(await whoami(b"", metadata=(("authorization", "Bearer beta-token"),)))
            assert beta["tenant"] == "beta"
            for metadata in (
                (),
                (("authorization", "Bearer nope"),),
                (("authorization", "alpha-token"),),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await whoami(b"", metadata=metadata)
                error = decode(caught.value)
                assert error.code == grpc.StatusCode.UNAUTHENTICATED
                assert error.reason == "UNAUTHENTICATED"
            # Health stays open for probes, without a token.
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await runner.stop()


async def test_an_unserved_method_is_unimplemented_not_internal(
    probe: tuple[ServiceRunner, grpc.aio.Channel],
) -> None:
    _, channel = probe
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(channel, "Unimplemented")(b"")
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def _scrape(runner: ServiceRunner) -> set[str]:
    """The series /metrics exposes (name and labels, no values)."""
    url = f"http://127.0.0.1:{runner.metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")}


async def test_unknown_methods_are_unimplemented_and_cache_or_count_nothing(
    app_database_url: str, token_file: Path
) -> None:
    runner = await start_probe(app_database_url, RATION_TOKEN_FILE=str(token_file))
    registered = {
        f"/{SERVICE}/{name}" for name in ("WhoAmI", "DomainError", "Crash", "Unimplemented")
    }
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
            good = (("authorization", "Bearer alpha-token"),)
            await call(channel, "WhoAmI")(b"", metadata=good)
            before = await _scrape(runner)
            callers = [(), (("authorization", "Bearer nope"),), good]

            async def unknown(number: int) -> None:
                path = f"/ration.probe{number % 7}.v1.Nope/Method{number}"
                metadata = callers[number % len(callers)]
                if number % 5 == 0:  # another call shape: one request, a stream of answers
                    stream = channel.unary_stream(path)(b"x", metadata=metadata)
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        async for _ in stream:
                            pass
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await channel.unary_unary(path)(b"x", metadata=metadata)
                error = decode(caught.value)
                assert (error.code, error.reason) == (
                    grpc.StatusCode.UNIMPLEMENTED,
                    "UNIMPLEMENTED",
                )
                assert error.domain == "ration.test.v1"

            for start in range(0, 2000, 100):
                await asyncio.gather(*(unknown(n) for n in range(start, start + 100)))
            assert (
                json.loads(await call(channel, "WhoAmI")(b"", metadata=good))["tenant"] == "alpha"
            )
            after = await _scrape(runner)
        for interceptor in runner.interceptors:
            assert interceptor.cached_methods <= registered
        assert after == before
        assert not [series for series in after if "Nope" in series or "Method1" in series]
    finally:
        await runner.stop()


async def test_the_bearer_scheme_is_accepted_in_any_case(
    app_database_url: str, token_file: Path
) -> None:
    runner = await start_probe(app_database_url, RATION_TOKEN_FILE=str(token_file))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
            for scheme in ("bearer", "BEARER", "beArer"):
                metadata = (("authorization", f"{scheme} alpha-token"),)
                answer = json.loads(await call(channel, "WhoAmI")(b"", metadata=metadata))
                assert answer["tenant"] == "alpha"
    finally:
        await runner.stop()
