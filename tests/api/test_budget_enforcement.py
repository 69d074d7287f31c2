"""INTERRUPT then ResumeRun; advisory mode (host or scope) never refuses or fails; metrics."""

from __future__ import annotations

import urllib.request
from typing import TypedDict

import asyncpg
import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import USD, Budget
from tests.support.errors import rpc_error
from tests.support.scenarios import run_everything
from tests.support.servers import StartServer


async def test_interrupt_then_resume_continues_with_raised_limits(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=100, threshold_percent=90, on_exhaustion=2)
    reservation = await budget.reserve("r", tokens=100)
    await budget.consume("r", reservation.reservation.reservation_id, tokens=90)
    refused = await rpc_error(budget.reserve("r", tokens=20))  # 90 + 20 > 100: a breach
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RUN_INTERRUPTED",
    )
    assert refused.metadata == {"state": "interrupted"}
    assert (await budget.get_run("r")).state == pb.RUN_STATE_INTERRUPTED
    still = await rpc_error(budget.reserve("r", tokens=1))
    assert still.reason == "RUN_INTERRUPTED"
    resumed = await budget.resume("r", approver="lead@example.com", tokens=400, cost_nanos=USD)
    assert resumed.state == pb.RUN_STATE_ACTIVE
    assert resumed.policy_version == 2
    assert resumed.effective_budget.max_tokens == 500
    assert not resumed.effective_budget.HasField("max_cost_nanos")  # unbounded stays unbounded
    granted = await budget.reserve("r", tokens=20)
    assert granted.reservation.granted.tokens == 20
    assert await budget.trace("r") == [
        ("budget.reserved", {"effectiveBudget": {"maxTokens": 100}, "scope": "run"}),
        ("budget.consumed", {"dimension": "tokens", "consumed": 90, "limit": 100, "remaining": 10}),
        (
            "budget.threshold.crossed",
            {"dimension": "tokens", "consumed": 90, "limit": 100, "percent": 90},
        ),
        ("budget.exhausted", {"dimension": "tokens", "consumed": 90, "limit": 100}),
        ("cap.breached", {"kind": "budget-tokens", "limit": 100, "observed": 110}),
        ("budget.reserved", {"effectiveBudget": {"maxTokens": 500}, "scope": "run"}),
    ]


async def test_resume_refuses_final_runs(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("failed", max_tokens=1)
    await budget.consume("failed", tokens=2)
    refused = await rpc_error(budget.resume("failed", tokens=10))
    assert (refused.reason, refused.metadata) == ("RUN_FAILED", {"state": "failed"})
    await budget.open_run("closed")
    await budget.close("closed")
    closed = await rpc_error(budget.resume("closed", tokens=10))
    assert (closed.reason, closed.metadata) == ("RUN_CLOSED", {"state": "closed"})


async def test_advisory_host_never_refuses_and_emits_events_only(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    runner = await start_server("budget", RATION_ENFORCE="advisory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.open_run("r", max_tool_calls=1, model_deny=["banned"], max_cost_nanos=USD)
        first = await budget.reserve("r", tool_calls=1)
        assert first.advisory_refusal_reason == ""
        held = await budget.reserve("r", tool_calls=1)  # contention
        assert held.advisory_refusal_reason == "BUDGET_HELD"
        denied = await budget.reserve("r", model="banned", cost_nanos=1)
        assert denied.advisory_refusal_reason == "BUDGET_MODEL_DENIED"
        await budget.consume("r", first.reservation.reservation_id, tool_calls=1)
        await budget.consume("r", held.reservation.reservation_id, tool_calls=1)
        breach = await budget.reserve("r", tool_calls=1)
        assert breach.advisory_refusal_reason == "BUDGET_EXHAUSTED"
        assert breach.reservation.granted.tool_calls == 1
        await budget.consume("r", cost_nanos=2 * USD)
        run = await budget.get_run("r")
        assert run.state == pb.RUN_STATE_ACTIVE
        assert run.advisory
        assert run.advisory_refusals == 3
        check = await budget.check("r", tool_calls=1)
        assert (check.would_grant, check.advisory_refusal_reason) == (True, "BUDGET_EXHAUSTED")
        types = [t for t, _ in await budget.trace("r")]
        # RFC 0084 section E: advisory is events only, no stop and no cap.breached; exhausted
        # comes when consumption reaches the limit (never at a would-be refusal), always
        # after threshold.crossed.
        assert types == [
            "budget.reserved",
            "budget.consumed",
            "budget.threshold.crossed",
            "budget.exhausted",
            "budget.consumed",
            "budget.consumed",
            "budget.threshold.crossed",
            "budget.exhausted",
        ]
        metrics = scrape(runner.metrics_port)
        assert 'ration_budget_advisory_refusals_total{reason="BUDGET_HELD"} 1.0' in metrics
        assert 'ration_budget_advisory_refusals_total{reason="BUDGET_EXHAUSTED"} 1.0' in metrics
        assert "ration_budget_breaches_total{" not in metrics


async def test_an_advisory_scope_shadows_its_runs_on_a_hard_host(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT, "shadow", max_tokens=10, enforcement=pb.ENFORCEMENT_ADVISORY
    )
    await budget.open_run("shadowed", project_id="shadow")
    await budget.open_run("hard", project_id="other", max_tokens=10)
    shadowed = await budget.reserve("shadowed", tokens=50)
    assert shadowed.advisory_refusal_reason == "BUDGET_EXHAUSTED"
    assert (await budget.get_run("shadowed")).state == pb.RUN_STATE_ACTIVE
    refused = await rpc_error(budget.reserve("hard", tokens=50))
    assert refused.reason == "BUDGET_EXHAUSTED"


async def test_advisory_mode_runs_every_scenario_without_a_refusal(
    start_server: StartServer,
) -> None:
    runner = await start_server("budget", RATION_ENFORCE="advisory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await run_everything(budget)
        for run_id in ("cost-run", "tool-run", "int-run", "pool-a", "pool-b"):
            assert (await budget.get_run(run_id)).state == pb.RUN_STATE_ACTIVE
            assert "run.failed" not in [t for t, _ in await budget.trace(run_id)]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


class ConsumeArgs(TypedDict):
    """The keyword arguments of a Consume sent twice."""

    request_id: str
    tokens: int
    cost_nanos: int


async def test_domain_metrics_count_after_commit(start_server: StartServer) -> None:
    runner = await start_server("budget")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.open_run(
            "r", project_id="acme", max_tokens=100, max_cost_nanos=USD, threshold_percent=50
        )
        reservation = await budget.reserve("r", model="gpt-4o", tokens=50)
        request: ConsumeArgs = {"request_id": "consume-1", "tokens": 60, "cost_nanos": USD // 2}
        await budget.consume("r", reservation.reservation.reservation_id, **request)
        await budget.consume("r", reservation.reservation.reservation_id, **request)  # a replay
        await rpc_error(budget.reserve("r", tokens=50))  # breach: fails the run
    metrics = scrape(runner.metrics_port)
    expected = [
        'ration_budget_consumed_tokens_total{model="gpt-4o"} 60.0',
        'ration_budget_consumed_cost_usd_total{model="gpt-4o"} 0.5',
        'ration_budget_decisions_total{decision="reserve",outcome="granted",reason=""} 1.0',
        'ration_budget_refusals_total{reason="BUDGET_EXHAUSTED",scope="run"} 1.0',
        'ration_budget_decisions_total{decision="consume",outcome="recorded",reason=""} 1.0',
        'decision="reserve",outcome="refused",reason="BUDGET_EXHAUSTED"} 1.0',
        'ration_budget_overruns_total{dimension="tokens"} 1.0',
        "ration_budget_holds_opened_total 1.0",
        'ration_budget_holds_ended_total{state="consumed"} 1.0',
        'ration_budget_breaches_total{dimension="tokens",enforcement="hard"} 1.0',
        'ration_budget_exhaustions_total{dimension="tokens"} 1.0',
        'ration_budget_threshold_crossings_total{dimension="tokens"} 1.0',
    ]
    for line in expected:
        assert line in metrics, line
    assert "run_id" not in metrics
    assert "reservation" not in metrics
