"""ration_client returns typed views against a real server: Decimal USD, None for unbounded,
enum members, typed refusals, every budget RPC, and worst-case holds that cannot overrun."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetHeld,
    BudgetPolicy,
    CheckResult,
    Dimension,
    DimensionStatus,
    Enforcement,
    ModelDenied,
    ModelPatterns,
    NotFound,
    OnExhaustion,
    Policy,
    Prices,
    ReservationState,
    ReserveMode,
    Run,
    RunEventType,
    RunOutcome,
    RunState,
    Scope,
    ScopeBudgetKind,
    Window,
    usd,
)
from ration_client import errors as client_errors
from ration_client.holds import WorstCase
from tests.support.ids import new_id
from tests.support.servers import SharedServers


@pytest.fixture
async def budget(shared_servers: SharedServers) -> AsyncIterator[BudgetClient]:
    """A client of the module's budget server: every test keeps to fresh run and scope ids."""
    async with BudgetClient(shared_servers.address("budget")) as client:
        yield client


async def test_a_run_is_a_view_with_decimal_cost_none_for_unbounded_and_enum_members(
    budget: BudgetClient,
) -> None:
    run_id = new_id("v1")
    policy = BudgetPolicy(max_cost_nanos=usd("1.00"), max_tokens=1000)
    opened = await budget.open_run(run_id, project_id="p", agent_id="a", policy=policy)
    await budget.consume(run_id, model="gpt-4o", usage=Amounts(tokens=10, cost_nanos=usd("0.25")))
    run = await budget.get_run(run_id)
    assert isinstance(run, Run)
    assert not isinstance(run, Message)
    assert (opened.run_id, opened.agent_id, opened.state) == (run_id, "a", RunState.ACTIVE)
    assert run.state is RunState.ACTIVE
    assert run.outcome is None
    assert run.created_at.tzinfo is not None
    assert run.effective_budget.max_cost == Decimal("1")
    assert run.effective_budget.max_tool_calls is None
    assert run.effective_budget.on_exhaustion is OnExhaustion.FAIL
    cost = run.status(Dimension.COST)
    assert isinstance(cost, DimensionStatus)
    assert (cost.limit, cost.consumed, cost.held, cost.remaining) == (
        Decimal("1"),
        Decimal("0.25"),
        Decimal(0),
        Decimal("0.75"),
    )
    assert all(isinstance(x, Decimal) for x in (cost.limit, cost.consumed, cost.remaining))
    tokens = run.status(Dimension.TOKENS)
    assert (tokens.limit, tokens.consumed, tokens.remaining) == (1000, 10, 990)
    assert type(tokens.consumed) is int
    tool_calls = run.status(Dimension.TOOL_CALLS)
    assert (tool_calls.limit, tool_calls.remaining) == (None, None)
    assert (tool_calls.binding_scope, tool_calls.binding_scope_id) == (Scope.RUN, "")


async def test_refusals_carry_typed_amounts_scope_and_retry_after(budget: BudgetClient) -> None:
    run_id = new_id("v2")
    policy = BudgetPolicy(
        max_cost_nanos=usd("1.00"),
        max_tokens=100,
        model_allow=ModelPatterns(patterns=["gpt-*"]),
    )
    await budget.open_run(run_id, project_id="p", policy=policy)
    first = await budget.reserve(run_id, model="gpt-4o", estimate=Amounts(tokens=60))
    with pytest.raises(BudgetHeld) as held:
        await budget.reserve(run_id, model="gpt-4o", estimate=Amounts(tokens=60))
    h = held.value
    assert (h.dimension, h.limit, h.consumed, h.held, h.requested) == (
        Dimension.TOKENS,
        100,
        0,
        60,
        60,
    )
    assert h.retry_after is not None
    assert h.retry_after > timedelta(0)
    await budget.release(run_id, first.reservation.reservation_id)
    with pytest.raises(ModelDenied) as denied:
        await budget.reserve(run_id, model="claude-3", estimate=Amounts(tokens=1))
    assert (denied.value.model, denied.value.scope) == ("claude-3", Scope.RUN)
    with pytest.raises(BudgetExhausted) as exhausted:
        await budget.reserve(run_id, model="gpt-4o", estimate=Amounts(cost_nanos=usd("1.5")))
    e = exhausted.value
    assert (e.dimension, e.limit, e.observed) == (Dimension.COST, Decimal("1"), Decimal("1.5"))
    assert isinstance(e.limit, Decimal)
    assert e.scope in (None, Scope.RUN)  # the run's own budget (named once the server does)
    assert e.scope_id == ""


def exhausted_by_a_pool() -> grpc.aio.AioRpcError:
    info = any_pb2.Any()
    info.Pack(
        error_details_pb2.ErrorInfo(
            reason="BUDGET_EXHAUSTED",
            domain="ration.budget.v1",
            metadata={
                "dimension": "cost",
                "limit": "5",
                "observed": "5.000000001",
                "scope": "project",
                "scopeId": "travel",
            },
        )
    )
    retry = any_pb2.Any()
    retry.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=3600)))
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    status = status_pb2.Status(code=code.value[0], message="m", details=[info, retry])
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, "m")


def test_a_pool_refusal_names_its_scope_and_the_next_window() -> None:
    error = client_errors.decode(exhausted_by_a_pool())
    assert isinstance(error, BudgetExhausted)
    assert (error.scope, error.scope_id) == (Scope.PROJECT, "travel")
    assert (error.limit, error.observed) == (Decimal(5), Decimal("5.000000001"))
    assert error.retry_after == timedelta(hours=1)
    assert error.retry_after_seconds == 3600


async def test_scope_budgets_round_trip_as_views(budget: BudgetClient) -> None:
    run_id = new_id("v3")
    travel = new_id("travel")
    policy = Policy(max_cost=Decimal("5"), max_tokens=10_000, model_deny=("o1*",))
    put = await budget.put_scope_budget(
        Scope.PROJECT, travel, ScopeBudgetKind.POOLED, policy=policy, window=Window.DAY
    )
    assert (put.scope, put.kind, put.window, put.enforcement) == (
        Scope.PROJECT,
        ScopeBudgetKind.POOLED,
        Window.DAY,
        Enforcement.HARD,
    )
    assert (put.version, put.policy.max_cost, put.policy.model_deny) == (1, Decimal(5), ("o1*",))
    assert put.policy.model_allow is None
    assert put.balance is None
    await budget.open_run(run_id, project_id=travel)
    await budget.consume(run_id, model="gpt-4o", usage=Amounts(tokens=7, cost_nanos=usd("0.5")))
    got = await budget.get_scope_budget(Scope.PROJECT, travel, ScopeBudgetKind.POOLED)
    assert got.balance is not None
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert got.balance.window_start == today
    by_dimension = {s.dimension: s for s in got.balance.dimensions}
    assert by_dimension[Dimension.COST].consumed == Decimal("0.5")
    assert by_dimension[Dimension.COST].remaining == Decimal("4.5")
    assert by_dimension[Dimension.TOKENS].remaining == 9993
    again = await budget.put_scope_budget(
        Scope.PROJECT, travel, ScopeBudgetKind.POOLED, policy=got.policy, window=got.window
    )
    assert (again.version, again.policy) == (2, got.policy)
    await budget.delete_scope_budget(Scope.PROJECT, travel, ScopeBudgetKind.POOLED)
    with pytest.raises(NotFound):
        await budget.get_scope_budget(Scope.PROJECT, travel, ScopeBudgetKind.POOLED)


async def test_interrupt_resume_check_close_events_and_capabilities_are_views(
    budget: BudgetClient,
) -> None:
    run_id = new_id("v4")
    policy = Policy(max_tokens=10, on_exhaustion=OnExhaustion.INTERRUPT)  # a view as input
    await budget.open_run(run_id, project_id="p", policy=policy)
    consumed = await budget.consume(run_id, model="gpt-4o", usage=Amounts(tokens=11))
    assert (consumed.state, consumed.reservation_state) == (RunState.INTERRUPTED, None)
    assert consumed.overrun == Amounts()
    resumed = await budget.resume_run(run_id, delta=Amounts(tokens=100), approver="ops on call")
    assert (resumed.state, resumed.effective_budget.max_tokens) == (RunState.ACTIVE, 110)
    assert resumed.policy_version == 2
    checked = await budget.check(run_id, estimate=Amounts(tokens=5), model="gpt-4o")
    assert isinstance(checked, CheckResult)
    assert (checked.would_grant, checked.state, checked.refusal_reason) == (
        True,
        RunState.ACTIVE,
        "",
    )
    assert checked.model_verdict is not None
    assert (checked.model_verdict.allowed, checked.model_verdict.scope) == (True, None)
    reserved = await budget.reserve(
        run_id, model="gpt-4o", estimate=Amounts(tokens=500), mode=ReserveMode.UP_TO
    )
    assert reserved.reservation.state is ReservationState.OPEN
    assert (reserved.reservation.requested.tokens, reserved.reservation.granted.tokens) == (
        500,
        99,
    )
    closed = await budget.close_run(run_id, RunOutcome.CANCELLED)
    assert (closed.run.state, closed.run.outcome, closed.released_holds) == (
        RunState.CLOSED,
        RunOutcome.CANCELLED,
        1,
    )
    events = await budget.list_events(run_id)
    assert [e.type for e in events][:3] == [
        RunEventType.BUDGET_RESERVED,
        RunEventType.BUDGET_CONSUMED,
        RunEventType.BUDGET_THRESHOLD_CROSSED,
    ]
    assert events[1].payload == {"dimension": "tokens", "consumed": 11, "limit": 10, "remaining": 0}
    watched = []
    async for event in budget.watch(run_id, after_seq=len(events) - 1):
        watched.append(event)
        break
    assert watched == events[-1:]
    caps = await budget.capabilities()
    assert caps.enforcement is Enforcement.HARD
    assert caps.scope_levels == (Scope.RUN, Scope.WORKFLOW, Scope.AGENT, Scope.PROJECT)
    assert (caps.max_budget_tokens, caps.max_budget_cost) == (None, None)
    assert "cost" in caps.dimensions


async def test_cost_event_payloads_read_as_decimal_usd(budget: BudgetClient) -> None:
    run_id = new_id("v5")
    await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_cost_nanos=usd("0.10")))
    await budget.consume(run_id, model="m", usage=Amounts(cost_nanos=usd("0.03")))
    consumed = [e for e in await budget.list_events(run_id) if e.type == "budget.consumed"]
    assert consumed[0].payload["consumed"] == Decimal("0.03")
    assert isinstance(consumed[0].payload["remaining"], Decimal)


PRICES = Prices(input_per_million=Decimal("2.50"), output_per_million=Decimal("10"))


async def test_call_reserves_the_worst_case_of_prompt_and_max_output_tokens(
    budget: BudgetClient,
) -> None:
    run_id = new_id("v6")
    await budget.open_run(run_id, project_id="p")
    async with budget.call(
        run_id, model="gpt-4o", prompt_tokens=1000, max_output_tokens=500, prices=PRICES
    ) as hold:
        # 1000 * $2.50/M + 500 * $10/M = $0.0075
        assert hold.reservation is not None
        assert hold.reservation.requested == Amounts(tokens=1500, cost_nanos=usd("0.0075"))
        assert hold.granted == hold.reservation.requested
        assert hold.max_tokens == 500
        usage = Amounts(tokens=1000 + 420, cost_nanos=PRICES.cost_nanos(1000, 420))
        settled = await hold.consume(usage)
    assert settled.overrun == Amounts()
    assert settled.reservation_state is ReservationState.CONSUMED
    with pytest.raises(ValueError, match="either estimate or max_output_tokens"):
        budget.call(run_id, model="m", estimate=Amounts(tokens=1), max_output_tokens=5)


@pytest.mark.parametrize(
    ("limits", "fits"),
    [
        (Policy(max_cost=Decimal("0.005")), 250),  # ($0.005 - $0.0025) / $10 per M
        (Policy(max_tokens=1100), 100),
        (Policy(max_cost=Decimal("0.004"), max_tokens=1300), 150),
        (Policy(max_cost=Decimal("0.001")), 0),  # not even the prompt fits
    ],
)
async def test_an_up_to_grant_tells_the_max_tokens_that_cannot_overrun(
    budget: BudgetClient, limits: Policy, fits: int
) -> None:
    run_id = new_id(f"v7-{fits}")
    await budget.open_run(run_id, project_id="p", policy=limits)
    async with budget.call(
        run_id,
        model="gpt-4o",
        prompt_tokens=1000,
        max_output_tokens=500,
        prices=PRICES,
        mode=ReserveMode.UP_TO,
    ) as hold:
        assert hold.max_tokens == fits
        if fits:
            # The provider bills the prompt and every one of max_tokens output tokens.
            usage = Amounts(tokens=1000 + fits, cost_nanos=PRICES.cost_nanos(1000, fits))
            assert (await hold.consume(usage)).overrun == Amounts()
    run = await budget.get_run(run_id)
    assert all(s.held == 0 for s in run.dimensions)


def test_the_worst_case_rounds_cost_up_and_max_tokens_down() -> None:
    cheap = Prices(input_per_million=Decimal("0.0001"), output_per_million=Decimal("0.0003"))
    worst = WorstCase(prompt_tokens=3, max_output_tokens=10, prices=cheap)
    assert worst.estimate == Amounts(tokens=13, cost_nanos=4)  # 0.3 + 3.0 nanos, rounded up
    # 1 nano left after the 0.3-nano prompt: 0.7 / 0.3 = 2.33 output tokens -> 2
    assert worst.max_tokens(Amounts(tokens=13, cost_nanos=1)) == 2
    assert worst.max_tokens(Amounts(tokens=2, cost_nanos=4)) == 0
    assert WorstCase(5, 7, None).estimate == Amounts(tokens=12)
    with pytest.raises(TypeError):
        Prices(input_per_million=0.5, output_per_million=Decimal(1))  # type: ignore[arg-type]
