"""The RPC → role tables: every registered method has a row, the auth interceptor enforces it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from budget_service.api import roles as budget_roles
from budget_service.definition import factory as budget_factory
from budget_service.usecases.settings import BudgetSettings
from memory_service.api import roles as memory_roles
from ration.budget.v1 import budget_service_pb2_grpc
from ration.memory.v1 import memory_service_pb2_grpc
from servicekit.auth import check_role_table
from servicekit.db import Database
from servicekit.server import ServiceRunner, service_methods
from servicekit.settings import SettingsError
from tests.support.errors import RpcErrorDetails, decode
from tests.support.servers import SharedServers, service_env
from tests.support.token_files import write_token_file

TABLES = {"budget": budget_roles.REQUIRED_ROLES, "memory": memory_roles.REQUIRED_ROLES}
SERVICES = {"budget": budget_roles.SERVICE_NAME, "memory": memory_roles.SERVICE_NAME}
# A caller holding every role but the one named: approver holds no other role.
LACKING = {"reader": "approver", "writer": "reader", "admin": "writer", "approver": "writer"}
ROWS = [
    pytest.param(kind, method, role, id=method.rsplit("/", 1)[1] + f"-{kind}")
    for kind, table in TABLES.items()
    for method, role in table.items()
]


class _Recorder:
    """Stands in for a grpc.aio.Server to see what the generated registration registers."""

    def __init__(self) -> None:
        self.methods: set[str] = set()

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.methods |= {f"/{service}/{name}" for name in handlers}


def registered(kind: str) -> set[str]:
    recorder = _Recorder()
    if kind == "budget":
        budget_service_pb2_grpc.add_BudgetServiceServicer_to_server(  # type: ignore[no-untyped-call]
            budget_service_pb2_grpc.BudgetServiceServicer(), recorder
        )
    else:
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(  # type: ignore[no-untyped-call]
            memory_service_pb2_grpc.MemoryServiceServicer(), recorder
        )
    return recorder.methods


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_the_role_table_names_every_registered_method(kind: str) -> None:
    assert set(TABLES[kind]) == registered(kind)
    assert set(TABLES[kind]) == service_methods(SERVICES[kind])


def write_tokens(path: Path) -> Path:
    roles = ("reader", "writer", "admin", "approver")
    return write_token_file(path, *((f"{role}-token", "acme", [role]) for role in roles))


async def call(channel: grpc.aio.Channel, kind: str, method: str, token: str) -> RpcErrorDetails:
    """Calls `method` with an empty request (invalid for most methods: a handler that ran would
    refuse it as VALIDATION_FAILED), and returns its status."""
    name = method.rsplit("/", 1)[1]
    streaming = service_method(kind, name).server_streaming
    metadata = (("authorization", f"Bearer {token}"),)
    try:
        if streaming:
            stream = channel.unary_stream(method)(b"", metadata=metadata, timeout=10)
            async for _ in stream:
                break
            stream.cancel()
        else:
            await channel.unary_unary(method)(b"", metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as error:
        return decode(error)
    return RpcErrorDetails(grpc.StatusCode.OK, "")


def service_method(kind: str, name: str) -> Any:
    from google.protobuf import descriptor_pool

    service = descriptor_pool.Default().FindServiceByName(SERVICES[kind])
    return service.methods_by_name[name]


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The module's servers (one per kind, shared by every row: a refusal writes nothing, and
    a handler that ran on an empty request refuses it) read the four role tokens."""
    tokens = write_tokens(tmp_path_factory.mktemp("rpc-roles") / "tokens.json")
    return {"RATION_TOKEN_FILE": str(tokens)}


@pytest.mark.parametrize(("kind", "method", "role"), ROWS)
async def test_each_rpc_refuses_a_caller_without_its_role(
    shared_servers: SharedServers, kind: str, method: str, role: str | None
) -> None:
    async with grpc.aio.insecure_channel(shared_servers.address(kind)) as channel:
        if role is None:  # open to any authenticated caller, even one holding only `approver`
            answered = await call(channel, kind, method, "approver-token")
            assert answered.code != grpc.StatusCode.PERMISSION_DENIED
        else:
            refused = await call(channel, kind, method, f"{LACKING[role]}-token")
            assert (refused.code, refused.reason, refused.metadata) == (
                grpc.StatusCode.PERMISSION_DENIED,
                "ROLE_REQUIRED",
                {"role": role},
            )
        anonymous = await call(channel, kind, method, "no-such-token")
        assert anonymous.code == grpc.StatusCode.UNAUTHENTICATED


async def test_a_method_missing_from_the_table_is_a_startup_error(
    app_database_url: str,
) -> None:
    settings = BudgetSettings.from_env(service_env(app_database_url))
    build = budget_factory(settings)
    method = f"/{budget_roles.SERVICE_NAME}/Reserve"

    def without_reserve(database: Database, registry: CollectorRegistry) -> Any:
        app = build(database, registry)
        roles = {m: r for m, r in app.roles.items() if m != method}
        return dataclasses.replace(app, roles=roles)

    runner = ServiceRunner(
        without_reserve, settings.server, Database(app_database_url, settings.database)
    )
    with pytest.raises(SettingsError, match=f"{method} has no required role"):
        await runner.start()
    await runner.stop()


def test_a_stale_row_or_an_unknown_role_is_refused() -> None:
    methods = {"/p.S/A", "/p.S/B"}
    check_role_table("probe", {"/p.S/A": "reader", "/p.S/B": None}, methods)
    with pytest.raises(SettingsError, match="/p.S/C is not a registered method"):
        check_role_table("probe", {"/p.S/A": None, "/p.S/B": None, "/p.S/C": None}, methods)
    with pytest.raises(SettingsError, match="names an unknown role"):
        check_role_table("probe", {"/p.S/A": "root", "/p.S/B": None}, methods)
