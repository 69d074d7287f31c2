"""GetCapabilities of both services tells the truth about their configuration."""

from __future__ import annotations

import json

import grpc

from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc
from ration.memory.v1 import memory_service_pb2, memory_service_pb2_grpc
from tests.support.servers import StartServer


async def budget_capabilities(runner_port: int) -> budget_pb2.GetCapabilitiesResponse:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner_port}") as channel:
        stub = budget_service_pb2_grpc.BudgetServiceStub(channel)  # type: ignore[no-untyped-call]
        return await stub.GetCapabilities(budget_pb2.GetCapabilitiesRequest())


async def test_budget_capabilities_default_to_hard_without_ceilings(
    start_server: StartServer,
) -> None:
    runner = await start_server("budget")
    reply = await budget_capabilities(runner.port)
    assert json.loads(reply.capabilities_json) == {
        "budget": {
            "supported": True,
            "dimensions": ["tokens", "cost", "toolCalls", "retries", "model"],
            "enforce": "hard",
            "scopes": ["run", "workflow", "agent", "project"],
        },
        "limits": {},
    }
    assert not reply.limits.HasField("max_budget_tokens")


async def test_budget_capabilities_follow_configuration(start_server: StartServer) -> None:
    runner = await start_server(
        "budget",
        RATION_ENFORCE="advisory",
        RATION_MAX_BUDGET_TOKENS="5000000",
        RATION_MAX_BUDGET_COST_USD="100",
    )
    reply = await budget_capabilities(runner.port)
    document = json.loads(reply.capabilities_json)
    assert document["budget"]["enforce"] == "advisory"
    assert document["limits"] == {"maxBudgetTokens": 5000000, "maxBudgetCostUsd": 100.0}
    assert reply.budget.enforce == "advisory"
    assert reply.limits.max_budget_tokens == 5_000_000
    assert reply.limits.max_budget_cost_nanos == 100_000_000_000


async def test_memory_capabilities_follow_configuration(start_server: StartServer) -> None:
    runner = await start_server(
        "memory",
        RATION_MEMORY_MAX_ACTIVE_ENTRIES="300",
        RATION_MEMORY_MAX_MANIFEST_ENTRIES="600",
        RATION_MEMORY_MAX_MANIFEST_BYTES="65536",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="3",
        RATION_MEMORY_MAX_ENTRY_BYTES="2048",
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.GetCapabilities(memory_service_pb2.GetCapabilitiesRequest())
    memory = json.loads(reply.capabilities_json)["memory"]
    assert memory["supported"] is True
    assert memory["maxEntrySizeBytes"] == 2048
    assert memory["ttlSupported"] is True
    assert memory["retention"] == {"ttl": True, "forget": True}
    assert reply.capacity_budget.max_active_entries == 300
    assert reply.capacity_budget.max_manifest_entries == 600
    assert reply.capacity_budget.max_manifest_bytes == 65536
    assert reply.compaction.enabled is True
    assert reply.compaction.min_tombstone_revisions == 3
    # Only what is actually served is advertised.
    assert memory["search"]["supported"] == bool(reply.search.modes)
