"""Composition root of the memory service: builds its parts explicitly from settings."""

from __future__ import annotations

import grpc
from prometheus_client import CollectorRegistry

from memory_service.capabilities import MemoryCapabilities
from memory_service.servicer import MemoryServicer
from memory_service.settings import MemorySettings
from ration.memory.v1 import memory_service_pb2_grpc
from servicekit.db import Database
from servicekit.migrations import MigrationSet
from servicekit.server import AppFactory, ServiceApp

SERVICE_NAME = "ration.memory.v1.MemoryService"
MIGRATIONS = MigrationSet("memory", "memory_service.migrations")


def factory(settings: MemorySettings) -> AppFactory:
    def build(database: Database, registry: CollectorRegistry) -> ServiceApp:
        servicer = MemoryServicer(MemoryCapabilities.from_settings(settings))

        def register(server: grpc.aio.Server) -> None:
            memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

        return ServiceApp(
            name="memory",
            service_name=SERVICE_NAME,
            error_domain="ration.memory.v1",
            migrations=[MIGRATIONS],
            register=register,
        )

    return build
