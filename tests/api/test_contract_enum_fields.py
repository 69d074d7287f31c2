"""The enum fields beside deprecated strings, and ListChanges beside GetChanges, on real servers."""

from __future__ import annotations

import grpc

from ration.budget.v1 import budget_pb2
from ration.memory.v1 import memory_pb2
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.ids import new_id
from tests.support.memory import Memory, pb
from tests.support.scenarios import run_everything

EVENT_TYPES = {
    "budget.reserved": (budget_pb2.RUN_EVENT_TYPE_BUDGET_RESERVED, "budget_reserved"),
    "budget.consumed": (budget_pb2.RUN_EVENT_TYPE_BUDGET_CONSUMED, "budget_consumed"),
    "budget.threshold.crossed": (
        budget_pb2.RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED,
        "budget_threshold_crossed",
    ),
    "budget.exhausted": (budget_pb2.RUN_EVENT_TYPE_BUDGET_EXHAUSTED, "budget_exhausted"),
    "cap.breached": (budget_pb2.RUN_EVENT_TYPE_CAP_BREACHED, "cap_breached"),
    "run.failed": (budget_pb2.RUN_EVENT_TYPE_RUN_FAILED, "run_failed"),
}
BREACH_KINDS = {
    budget_pb2.DIMENSION_TOKENS: "budget-tokens",
    budget_pb2.DIMENSION_COST: "budget-cost",
    budget_pb2.DIMENSION_TOOL_CALLS: "budget-tool-calls",
    budget_pb2.DIMENSION_RETRIES: "budget-retries",
}
SCOPE_WORDS = {
    budget_pb2.SCOPE_RUN: "run",
    budget_pb2.SCOPE_WORKFLOW: "workflow",
    budget_pb2.SCOPE_AGENT: "agent",
    budget_pb2.SCOPE_PROJECT: "project",
}


async def test_run_events_carry_enum_types_and_the_deprecated_strings_alike(
    budget_channel: grpc.aio.Channel,
) -> None:
    # run_everything's runs and pools have fixed ids: a database of its own.
    budget = Budget(budget_channel)
    await run_everything(budget)
    seen_types, seen_scopes = set(), set()
    for run_id in ("cost-run", "tool-run", "int-run", "pool-a", "pool-b"):
        for event in await budget.events(run_id):
            event_type, payload = EVENT_TYPES[event.type]
            assert event.event_type == event_type
            assert event.WhichOneof("payload") == payload
            seen_types.add(event.type)
            if event.HasField("budget_reserved"):
                reserved = event.budget_reserved
                assert SCOPE_WORDS[reserved.binding_scope] == reserved.scope
                seen_scopes.add(reserved.scope)
            if event.HasField("cap_breached"):
                breach = event.cap_breached
                assert BREACH_KINDS[breach.dimension] == breach.kind
    assert seen_types == set(EVENT_TYPES)
    assert seen_scopes >= {"run", "project"}


async def test_watched_events_carry_the_enum_type(shared_budget_channel: grpc.aio.Channel) -> None:
    budget, run_id = Budget(shared_budget_channel), new_id("watch-enum")
    await budget.open_run(run_id, max_tokens=10)
    stream = budget.stub.WatchRunEvents(budget_pb2.WatchRunEventsRequest(run_id=run_id))
    first = await stream.read()
    stream.cancel()
    assert (first.event.type, first.event.event_type) == (
        "budget.reserved",
        budget_pb2.RUN_EVENT_TYPE_BUDGET_RESERVED,
    )
    assert first.event.budget_reserved.binding_scope == budget_pb2.SCOPE_RUN


async def test_budget_capabilities_name_enforcement_and_scopes_as_enums(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    reply = await Budget(shared_budget_channel).stub.GetCapabilities(
        budget_pb2.GetCapabilitiesRequest()
    )
    assert (reply.budget.enforce, reply.budget.enforcement) == ("hard", budget_pb2.ENFORCEMENT_HARD)
    assert list(reply.budget.scopes) == ["run", "workflow", "agent", "project"]
    assert [SCOPE_WORDS[s] for s in reply.budget.scope_levels] == list(reply.budget.scopes)


async def test_list_changes_pages_exactly_as_get_changes(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("contracts/changes"))
    first = await memory.append(*(f"entry {n}" for n in range(5)))
    await memory.forget(first.entries[0].entry_id, reason="stale")

    async def pages(rpc: str, request_type: type) -> list[list[memory_pb2.Change]]:
        found, token = [], ""
        while True:
            request = request_type(memory_ref=memory.ref, since=0, page_size=2, page_token=token)
            reply = await getattr(memory.stub, rpc)(request)
            found.append(list(reply.changes))
            if not (token := reply.next_page_token):
                return found

    listed = await pages("ListChanges", pb.ListChangesRequest)
    assert [len(p) for p in listed] == [2, 2, 2]
    assert listed == await pages("GetChanges", pb.GetChangesRequest)
    beyond = pb.ListChangesRequest(memory_ref=memory.ref, revision=3)
    refused = await rpc_error(memory.stub.ListChanges(beyond))
    assert (refused.code, refused.reason) == (grpc.StatusCode.NOT_FOUND, "REVISION_NOT_FOUND")


async def test_revisions_carry_their_operation_as_enum_and_word(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("contracts/revisions"))
    appended = await memory.append("one", "one")
    await memory.forget(appended.entries[0].entry_id)
    await memory.reactivate(appended.entries[0].entry_id)
    await memory.dedupe()
    revisions = await memory.revisions()
    assert [(r.operation, r.revision_operation) for r in revisions] == [
        ("append", memory_pb2.REVISION_OPERATION_APPEND),
        ("forget", memory_pb2.REVISION_OPERATION_FORGET),
        ("reactivate", memory_pb2.REVISION_OPERATION_REACTIVATE),
        ("organize", memory_pb2.REVISION_OPERATION_ORGANIZE),
    ]


async def test_memory_capabilities_name_modes_and_counter_as_enums(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    stub = Memory(shared_memory_channel, "x").stub  # capabilities name no memory
    reply = await stub.GetCapabilities(pb.GetCapabilitiesRequest())
    words = {memory_pb2.SEARCH_MODE_SEMANTIC: "semantic", memory_pb2.SEARCH_MODE_FILTER: "filter"}
    assert reply.search.modes
    assert [words[m] for m in reply.search.search_modes] == list(reply.search.modes)
    injection = reply.injection_budget
    assert injection.supported
    counters = {
        memory_pb2.TOKEN_COUNTER_O200K_BASE: "o200k_base",
        memory_pb2.TOKEN_COUNTER_CL100K_BASE: "cl100k_base",
        memory_pb2.TOKEN_COUNTER_CHARS: "chars",
    }
    assert counters[injection.default_token_counter] == injection.token_counter
