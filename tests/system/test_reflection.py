"""Server reflection of `ration up` as grpcurl sees it: services, methods, messages, details."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2  # noqa: F401  (the local definitions to compare with)
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from ration.budget.v1 import budget_service_pb2  # noqa: F401
from ration.memory.v1 import memory_service_pb2  # noqa: F401
from tests.support.procs import BIN, Proc, clean_env

pytestmark = pytest.mark.system

SERVICES = {
    "budget": "ration.budget.v1.BudgetService",
    "memory": "ration.memory.v1.MemoryService",
}
ERROR_DETAILS = (
    "google.rpc.ErrorInfo",
    "google.rpc.BadRequest",
    "google.rpc.RetryInfo",
    "google.rpc.QuotaFailure",
    "google.rpc.PreconditionFailure",
)


local = descriptor_pool.Default()


def fields(described: object) -> list[tuple[str, list[str]]]:
    """Names of methods (with their request and response types) or of messages' fields."""
    out = []
    for item in described:  # type: ignore[attr-defined]
        if hasattr(item, "input_type"):
            out.append((item.name, [item.input_type.full_name, item.output_type.full_name]))
        else:
            out.append((item.full_name, [f.name for f in item.fields]))
    return out


def test_reflection_describes_both_services_their_messages_and_error_details(
    database_url: str,
) -> None:
    proc = Proc.start([str(BIN / "ration"), "up"], clean_env(DATABASE_URL=database_url))
    try:
        proc.wait_for("ready:")
        for kind, service in SERVICES.items():
            with grpc.insecure_channel(proc.addresses[kind]) as channel:
                database = ProtoReflectionDescriptorDatabase(channel)
                assert set(database.get_services()) >= {
                    service,
                    "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection",
                }
                pool = descriptor_pool.DescriptorPool(database)
                described = pool.FindServiceByName(service)
                assert len(described.methods) > 3
                assert fields(described.methods) == fields(local.FindServiceByName(service).methods)
                for method in described.methods:
                    for message in (method.input_type, method.output_type):
                        assert fields([pool.FindMessageTypeByName(message.full_name)]) == fields(
                            [local.FindMessageTypeByName(message.full_name)]
                        ), message.full_name
                for detail in ERROR_DETAILS:
                    found = pool.FindMessageTypeByName(detail)
                    assert fields([found]) == fields([local.FindMessageTypeByName(detail)])
    finally:
        assert proc.stop() == 0, proc.stderr_tail()
