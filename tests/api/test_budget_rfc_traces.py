"""RFC 0084's two traces end to end: exact event order, exact OpenWOP payloads, then refusal."""

from __future__ import annotations

import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import USD, Budget
from tests.support.errors import rpc_error
from tests.support.scenarios import rfc_cost_trace, rfc_tool_call_trace


async def test_cost_trace_crosses_exhausts_breaches_and_fails_the_run(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await rfc_cost_trace(budget)
    assert await budget.trace("cost-run") == [
        ("budget.reserved", {"effectiveBudget": {"maxCostUsd": 1.0}, "scope": "run"}),
        ("budget.consumed", {"dimension": "cost", "consumed": 0.5, "limit": 1.0, "remaining": 0.5}),
        ("budget.consumed", {"dimension": "cost", "consumed": 0.8, "limit": 1.0, "remaining": 0.2}),
        (
            "budget.threshold.crossed",
            {"dimension": "cost", "consumed": 0.8, "limit": 1.0, "percent": 80},
        ),
        (
            "budget.consumed",
            {"dimension": "cost", "consumed": 1.02, "limit": 1.0, "remaining": 0.0},
        ),
        ("budget.exhausted", {"dimension": "cost", "consumed": 1.02, "limit": 1.0}),
        ("cap.breached", {"kind": "budget-cost", "limit": 1.0, "observed": 1.02}),
        (
            "run.failed",
            {
                "error": {
                    "code": "budget_exhausted",
                    "message": "budget exhausted: cost limit 1.0, observed 1.02",
                }
            },
        ),
    ]
    run = await budget.get_run("cost-run")
    assert run.state == pb.RUN_STATE_FAILED
    assert run.failure_code == "budget_exhausted"
    for _ in range(2):  # every later Reserve, whatever it asks for
        refused = await rpc_error(budget.reserve("cost-run", tokens=1))
        assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.reason == "BUDGET_EXHAUSTED"
        assert refused.metadata == {
            "dimension": "cost",
            "limit": "1.0",
            "observed": "1.02",
            "scope": "run",
            "scopeId": "",
        }
    # Usage is still recorded on a failed run: the provider billed it.
    consumed = await budget.consume("cost-run", cost_nanos=10_000_000)
    assert consumed.state == pb.RUN_STATE_FAILED
    assert [d.consumed for d in consumed.dimensions if d.dimension == pb.DIMENSION_COST] == [
        1_030_000_000
    ]


async def test_typed_event_payloads_carry_native_units(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    await rfc_cost_trace(budget)
    events = await budget.events("cost-run")
    assert [e.seq for e in events] == list(range(1, 9))
    reserved = events[0].budget_reserved
    assert reserved.effective_budget.max_cost_nanos == USD
    assert reserved.effective_budget.threshold_percent == 80
    assert reserved.scope == "run"
    breached = events[6].cap_breached
    assert (breached.kind, breached.dimension) == ("budget-cost", pb.DIMENSION_COST)
    assert (breached.limit, breached.observed) == (USD, 1_020_000_000)
    assert events[7].run_failed.code == "budget_exhausted"


async def test_tool_call_trace_third_reserve_breaches_and_fails(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("tool-run", max_tool_calls=2, threshold_percent=50)
    for _ in range(2):
        reservation = await budget.reserve("tool-run", tool_calls=1)
        await budget.consume("tool-run", reservation.reservation.reservation_id, tool_calls=1)
    refused = await rpc_error(budget.reserve("tool-run", tool_calls=1))
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "BUDGET_EXHAUSTED",
    )
    assert refused.metadata == {
        "dimension": "toolCalls",
        "limit": "2",
        "observed": "3",
        "scope": "run",
        "scopeId": "",
    }
    assert await budget.trace("tool-run") == [
        ("budget.reserved", {"effectiveBudget": {"maxToolCalls": 2}, "scope": "run"}),
        ("budget.consumed", {"dimension": "toolCalls", "consumed": 1, "limit": 2, "remaining": 1}),
        (
            "budget.threshold.crossed",
            {"dimension": "toolCalls", "consumed": 1, "limit": 2, "percent": 50},
        ),
        ("budget.consumed", {"dimension": "toolCalls", "consumed": 2, "limit": 2, "remaining": 0}),
        ("budget.exhausted", {"dimension": "toolCalls", "consumed": 2, "limit": 2}),
        ("cap.breached", {"kind": "budget-tool-calls", "limit": 2, "observed": 3}),
        (
            "run.failed",
            {
                "error": {
                    "code": "budget_exhausted",
                    "message": "budget exhausted: toolCalls limit 2, observed 3",
                }
            },
        ),
    ]
    assert (await budget.get_run("tool-run")).state == pb.RUN_STATE_FAILED
    again = await rpc_error(budget.reserve("tool-run", tool_calls=1))
    assert again.reason == "BUDGET_EXHAUSTED"


async def test_the_scenario_helper_matches_the_trace(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    await rfc_tool_call_trace(budget)
    types = [t for t, _ in await budget.trace("tool-run")]
    assert types[-2:] == ["cap.breached", "run.failed"]
