"""Model allow/deny across scopes: deny wins, every allow list must match, empty allows none."""

from __future__ import annotations

import asyncpg
import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget
from tests.support.errors import rpc_error


async def reservations(db: asyncpg.Connection, run_id: str) -> int:
    return await db.fetchval("SELECT count(*) FROM budget.holds WHERE run_id = $1", run_id)


async def test_a_denied_model_is_refused_before_any_hold_exists(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", model_deny=["gpt-4-32k"], max_tokens=1000)
    refused = await rpc_error(budget.reserve("r", model="gpt-4-32k", tokens=10))
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION
    assert refused.reason == "BUDGET_MODEL_DENIED"
    assert refused.metadata == {"model": "gpt-4-32k", "scope": "run", "scopeId": ""}
    assert await reservations(db, "r") == 0
    # Nothing was spent or held; the refusal is only an append-only ledger row.
    run = await budget.get_run("r")
    assert run.state == pb.RUN_STATE_ACTIVE
    assert all(d.held == 0 and d.consumed == 0 for d in run.dimensions)
    ledger = await db.fetch("SELECT decision, reason FROM budget.ledger WHERE run_id = 'r'")
    assert [(r["decision"], r["reason"]) for r in ledger] == [
        ("open", None),
        ("refusal", "BUDGET_MODEL_DENIED"),
    ]
    # Other models still go through.
    granted = await budget.reserve("r", model="gpt-4o", tokens=10)
    assert granted.reservation.granted.tokens == 10


async def test_deny_in_any_scope_wins_over_allow_in_another(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(pb.SCOPE_PROJECT, "p", model_deny=["claude-3-opus*"])
    await budget.put_scope(pb.SCOPE_AGENT, "a", model_allow=["claude-*"])
    await budget.open_run("r", project_id="p", agent_id="a", model_allow=["claude-3-opus-2024"])
    refused = await rpc_error(budget.reserve("r", model="claude-3-opus-2024", tokens=1))
    assert refused.reason == "BUDGET_MODEL_DENIED"
    assert (refused.metadata["scope"], refused.metadata["scopeId"]) == ("project", "p")
    assert await reservations(db, "r") == 0
    check = await budget.check("r", model="claude-3-opus-2024", tokens=1)
    assert (check.would_grant, check.refusal_reason) == (False, "BUDGET_MODEL_DENIED")
    assert (check.model_verdict.scope, check.model_verdict.scope_id) == (pb.SCOPE_PROJECT, "p")


async def test_every_declared_allow_list_must_match(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(pb.SCOPE_WORKFLOW, "w", model_allow=["gpt-*", "claude-*"])
    await budget.open_run("r", workflow_id="w", model_allow=["gpt-4o*"])
    assert (await budget.reserve("r", model="gpt-4o-mini", tokens=1)).reservation.reservation_id
    refused = await rpc_error(budget.reserve("r", model="claude-3-haiku", tokens=1))
    assert (refused.reason, refused.metadata["scope"]) == ("BUDGET_MODEL_DENIED", "run")
    other = await rpc_error(budget.reserve("r", model="gpt-3.5-turbo", tokens=1))
    assert other.reason == "BUDGET_MODEL_DENIED"


async def test_an_empty_allow_list_allows_nothing(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("none", model_allow=[])
    await budget.open_run("any")  # no allow list at all: everything is allowed
    for model in ("gpt-4o", "claude-3-haiku", "*"):
        refused = await rpc_error(budget.reserve("none", model=model, tokens=1))
        assert refused.reason == "BUDGET_MODEL_DENIED"
        assert (await budget.reserve("any", model=model, tokens=1)).reservation.reservation_id
    assert await reservations(db, "none") == 0
    assert (await budget.get_run("none")).state == pb.RUN_STATE_ACTIVE


async def test_tool_call_holds_name_no_model_and_skip_model_policy(
    budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", model_allow=[], max_tool_calls=2)
    # An empty allow list denies every model call, but a tool call is not a model call.
    granted = await budget.reserve("r", model="", tool_calls=1)
    assert granted.reservation.granted.tool_calls == 1
    consumed = await budget.consume("r", granted.reservation.reservation_id, model="", tool_calls=1)
    assert consumed.state == pb.RUN_STATE_ACTIVE
    # A model call must say which model it uses.
    refused = await rpc_error(budget.reserve("r", model="", tokens=10))
    assert refused.reason == "VALIDATION_FAILED"
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
