"""Server reflection under both names: grpc.reflection.v1 (what current grpcurl, grpcui and
Postman ask first) beside v1alpha (what grpcio-reflection ships)."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
_ALPHA_PREFIX = f".{reflection_pb2.DESCRIPTOR.package}."


def _renamed(type_name: str) -> str:
    if type_name.startswith(_ALPHA_PREFIX):
        return f".{V1_PACKAGE}." + type_name.removeprefix(_ALPHA_PREFIX)
    return type_name


def add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """grpc/reflection/v1/reflection.proto into `pool`, so reflection can describe itself: v1
    is v1alpha under another package (the same messages, fields and numbers), so its
    descriptor is v1alpha's renamed rather than a second copy of the upstream file."""
    try:
        pool.FindFileByName(V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # messages and enums only; setting it types a field
                field.type_name = _renamed(field.type_name)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type)
            method.output_type = _renamed(method.output_type)
    pool.AddSerializedFile(proto.SerializeToString())


def enable_v1_reflection(
    server: grpc.aio.Server, service_names: tuple[str, ...], pool: descriptor_pool.DescriptorPool
) -> None:
    """Serves grpc.reflection.v1.ServerReflection with grpcio-reflection's servicer: the wire
    format of the two versions is the same, so v1alpha's messages read v1 requests and write v1
    answers byte for byte."""
    add_v1_descriptor(pool)
    servicer = reflection.aio.ReflectionServicer(service_names, pool=pool)
    handler = grpc.method_handlers_generic_handler(
        V1_SERVICE,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
