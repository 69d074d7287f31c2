"""A grpc.reflection.v1 client (current grpcurl, grpcui, Postman) lists and describes the
services, as a v1alpha one does."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.support.servers import StartServer

# The v1 wire format is v1alpha's under another package: these messages encode v1 requests.
Request = reflection_pb2.ServerReflectionRequest
Response = reflection_pb2.ServerReflectionResponse


async def ask(
    address: str, version: str, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=Request.SerializeToString,
            response_deserializer=Response.FromString,
        )
        stream = call(iter([request]))
        answers = [answer async for answer in stream]
    assert len(answers) == 1
    return answers[0]


SERVICES = [
    ("budget", "ration.budget.v1.BudgetService"),
    ("memory", "ration.memory.v1.MemoryService"),
]
V1_SELF = ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1")


@pytest.mark.parametrize(("kind", "service"), SERVICES)
async def test_a_v1_client_lists_and_describes_the_services(
    start_server: StartServer, kind: str, service: str
) -> None:
    runner = await start_server(kind)
    address = f"127.0.0.1:{runner.port}"
    listed = await ask(address, "v1", Request(list_services="*"))
    names = {s.name for s in listed.list_services_response.service}
    assert names >= {
        service,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    alpha = await ask(address, "v1alpha", Request(list_services="*"))
    assert {s.name for s in alpha.list_services_response.service} == names

    for symbol, package in ((service, service.rsplit(".", 1)[0]), V1_SELF):
        found = await ask(address, "v1", Request(file_containing_symbol=symbol))
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in found.file_descriptor_response.file_descriptor_proto
        ]
        assert files, found
        assert files[0].package == package
        assert symbol.rsplit(".", 1)[1] in {s.name for s in files[0].service}
