"""Run lifecycle, scope budgets (caps, pools, windows), tenant isolation and roles.

Tests on runs and scopes of their own share the module's server and database; those that
count or move rows across the database, or configure their own server, keep their own."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, timedelta
from pathlib import Path

import asyncpg
import grpc
from google.rpc import error_details_pb2

from budget_service.domain.policy import Window
from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import USD, Budget, new_id
from tests.support.errors import rpc_error
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file
from tests.support.windows import window_start


def status(run: pb.Run, dimension: int, scope: int = pb.SCOPE_RUN) -> pb.DimensionStatus:
    return next(d for d in run.dimensions if d.dimension == dimension and d.binding_scope == scope)


async def test_open_run_is_idempotent_per_run_id(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    first = await budget.open_run("r", project_id="p", max_tokens=10)
    again = await budget.open_run("r", project_id="p", max_tokens=10)  # another request_id
    assert again.run_id == first.run_id
    assert again.created_at == first.created_at
    assert len(await budget.events("r")) == 1  # one budget.reserved
    other = await rpc_error(budget.open_run("r", project_id="p", max_tokens=11))
    assert (other.code, other.reason) == (grpc.StatusCode.ALREADY_EXISTS, "RUN_EXISTS")
    assert other.metadata == {"runId": "r"}
    owner = await rpc_error(budget.open_run("r", project_id="q", max_tokens=10))
    assert owner.reason == "RUN_EXISTS"
    assert await db.fetchval("SELECT count(*) FROM budget.runs") == 1


async def test_unknown_runs_are_not_found(shared_budget_channel: grpc.aio.Channel) -> None:
    budget, nope = Budget(shared_budget_channel), new_id("nope")
    for call in (budget.get_run(nope), budget.reserve(nope, tokens=1), budget.check(nope)):
        missing = await rpc_error(call)
        assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")


async def test_close_releases_holds_refuses_reserve_and_still_records_usage(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=100)
    await budget.reserve("r", tokens=30)
    await budget.reserve("r", tokens=30)
    closed = await budget.close("r", pb.RUN_OUTCOME_CANCELLED)
    assert closed.released_holds == 2
    assert closed.run.state == pb.RUN_STATE_CLOSED
    assert closed.run.outcome == pb.RUN_OUTCOME_CANCELLED
    assert status(closed.run, pb.DIMENSION_TOKENS).held == 0
    refused = await rpc_error(budget.reserve("r", tokens=1))
    assert (refused.reason, refused.metadata) == ("RUN_CLOSED", {"state": "closed"})
    consumed = await budget.consume("r", tokens=5)
    assert consumed.state == pb.RUN_STATE_CLOSED
    again = await budget.close("r")
    assert (again.released_holds, again.run.outcome) == (0, pb.RUN_OUTCOME_CANCELLED)
    states = await db.fetch("SELECT state FROM budget.holds")
    assert sorted(r["state"] for r in states) == ["released", "released"]


async def test_scope_caps_and_host_ceilings_bind_the_effective_budget(
    start_server: StartServer,
) -> None:
    runner = await start_server("budget", RATION_MAX_BUDGET_COST_USD="5")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await budget.put_scope(pb.SCOPE_PROJECT, "p", max_tokens=500, max_cost_nanos=50 * USD)
        await budget.put_scope(pb.SCOPE_WORKFLOW, "w", max_tokens=800)
        run = await budget.open_run(
            "r", project_id="p", workflow_id="w", max_tokens=1000, max_tool_calls=3
        )
        assert run.effective_budget.max_tokens == 500
        assert run.effective_budget.max_cost_nanos == 5 * USD
        tokens, cost = (
            status(run, pb.DIMENSION_TOKENS, pb.SCOPE_PROJECT),
            status(run, pb.DIMENSION_COST),
        )
        assert (tokens.binding_scope_id, tokens.limit) == ("p", 500)
        assert (cost.clamped_by, cost.limit) == ("host", 5 * USD)
        events = await budget.trace("r")
        assert events[0] == (
            "budget.reserved",
            {
                "effectiveBudget": {"maxTokens": 500, "maxCostUsd": 5.0, "maxToolCalls": 3},
                "scope": "run",  # the narrowest scope binding any dimension (tool calls)
            },
        )


async def test_a_pool_is_shared_by_every_run_of_its_scope(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    budget = Budget(shared_budget_channel)
    p, a, b = new_id("p"), new_id("a"), new_id("b")
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        p,
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_MONTH,
        max_tokens=100,
    )
    await budget.open_run(a, project_id=p, max_tokens=1000)
    await budget.open_run(b, project_id=p, max_tokens=1000)
    reservation = await budget.reserve(a, tokens=70)
    held = await rpc_error(budget.reserve(b, tokens=40))  # fits run b, not the pool
    assert held.reason == "BUDGET_HELD"
    await budget.consume(a, reservation.reservation.reservation_id, tokens=70)
    spent = await rpc_error(budget.reserve(b, tokens=40))
    # The pool cannot fit it: refused naming the pool, until the next window; run b lives.
    assert (spent.code, spent.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXHAUSTED")
    assert spent.metadata == {
        "dimension": "tokens",
        "limit": "100",
        "observed": "110",
        "scope": "project",
        "scopeId": p,
    }
    retry = spent.require(error_details_pb2.RetryInfo).retry_delay.ToTimedelta()
    assert timedelta(0) < retry <= timedelta(days=31)
    assert (await budget.get_run(b)).state == pb.RUN_STATE_ACTIVE
    assert "cap.breached" not in [t for t, _ in await budget.trace(b)]
    last = await budget.reserve(b, tokens=30)
    assert last.reservation.granted.tokens == 30
    reply = await budget.stub.GetScopeBudget(
        pb.GetScopeBudgetRequest(
            scope=pb.SCOPE_PROJECT, scope_id=p, kind=pb.SCOPE_BUDGET_KIND_POOLED
        )
    )
    tokens = next(d for d in reply.balance.dimensions if d.dimension == pb.DIMENSION_TOKENS)
    assert (tokens.limit, tokens.consumed, tokens.held, tokens.remaining) == (100, 70, 30, 0)
    assert reply.budget.version == 1


async def test_pool_events_go_to_the_pool_once_per_window_never_into_run_logs(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        "p",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        max_tokens=100,
    )
    await budget.open_run("a", project_id="p")
    await budget.open_run("b", project_id="p")
    await budget.consume("a", tokens=85)  # crosses the pool's 80 %
    await budget.consume("b", tokens=20)  # exhausts it (105 of 100: usage is never refused)
    await budget.consume("a", tokens=1)  # nothing new: once per pool, window and dimension
    refused = await rpc_error(budget.reserve("a", tokens=1))
    assert (refused.reason, refused.metadata["scope"]) == ("BUDGET_EXHAUSTED", "project")
    rows = await db.fetch(
        "SELECT scope, scope_id, seq, type, payload_json FROM budget.pool_events ORDER BY seq"
    )
    assert [(r["scope"], r["scope_id"], r["seq"], r["type"]) for r in rows] == [
        ("project", "p", 1, "budget.threshold.crossed"),
        ("project", "p", 2, "budget.exhausted"),
    ]
    assert json.loads(rows[1]["payload_json"]) == {
        "dimension": "tokens",
        "consumed": 105,
        "limit": 100,
    }
    for run_id in ("a", "b"):  # the runs have no limit of their own: no events of the pool's
        assert [t for t, _ in await budget.trace(run_id)] == ["budget.reserved"]
        assert (await budget.get_run(run_id)).state == pb.RUN_STATE_ACTIVE


async def test_a_new_window_is_a_new_balance_row(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT, "p", kind=pb.SCOPE_BUDGET_KIND_POOLED, window=pb.WINDOW_DAY, max_tokens=50
    )
    await budget.open_run("r", project_id="p")
    await budget.consume("r", tokens=50)
    assert (await rpc_error(budget.reserve("r", tokens=1))).reason == "BUDGET_EXHAUSTED"
    await budget.open_run("next-day", project_id="p")
    # Pretend yesterday's spend: the stored row moves one window back; nothing is reset.
    await db.execute(
        "UPDATE budget.pool_balances SET window_start = window_start - interval '1 day'"
    )
    granted = await budget.reserve("next-day", tokens=50)
    assert granted.reservation.granted.tokens == 50
    rows = await db.fetch(
        "SELECT window_start, consumed_tokens, held_tokens FROM budget.pool_balances"
        " ORDER BY window_start"
    )
    now = await db.fetchval("SELECT now()")
    today = window_start(Window.DAY, now)
    assert [(r["consumed_tokens"], r["held_tokens"]) for r in rows] == [(50, 0), (0, 50)]
    assert rows[1]["window_start"] == today


async def test_scope_budgets_can_be_replaced_read_and_deleted(
    shared_budget_channel: grpc.aio.Channel,
) -> None:
    budget, agent = Budget(shared_budget_channel), new_id("a")
    first = await budget.put_scope(pb.SCOPE_AGENT, agent, max_retries=0, model_allow=[])
    second = await budget.put_scope(pb.SCOPE_AGENT, agent, max_retries=2)
    assert (first.version, second.version) == (1, 2)
    assert first.policy.HasField("model_allow")
    assert not second.policy.HasField("model_allow")
    key = pb.GetScopeBudgetRequest(
        scope=pb.SCOPE_AGENT, scope_id=agent, kind=pb.SCOPE_BUDGET_KIND_PER_RUN_CAP
    )
    got = await budget.stub.GetScopeBudget(key)
    assert got.budget.policy.max_retries == 2
    assert not got.HasField("balance")
    for _ in range(2):  # deleting an absent budget succeeds too
        delete = pb.DeleteScopeBudgetRequest(
            request_id=new_id(), scope=key.scope, scope_id=key.scope_id, kind=key.kind
        )
        await budget.stub.DeleteScopeBudget(delete)
    missing = await rpc_error(budget.stub.GetScopeBudget(key))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "SCOPE_BUDGET_NOT_FOUND")


def token_file(path: Path) -> Path:
    return write_token_file(
        path,
        ("reader-a", "a", ["reader"]),
        ("writer-a", "a", ["writer"]),
        ("admin-a", "a", ["admin"]),
        ("writer-b", "b", ["writer"]),
    )


async def test_tenants_are_isolated_and_roles_enforced(
    start_server: StartServer, tmp_path: Path
) -> None:
    runner = await start_server("budget", RATION_TOKEN_FILE=str(token_file(tmp_path / "t.json")))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:

        def as_(token: str) -> Budget:
            return Budget(channel, (("authorization", f"Bearer {token}"),))

        writer_a, reader_a, admin_a = as_("writer-a"), as_("reader-a"), as_("admin-a")
        await writer_a.open_run("shared-name", max_tokens=10)
        await as_("writer-b").open_run("shared-name", max_tokens=99)  # another tenant's run
        assert (await reader_a.get_run("shared-name")).effective_budget.max_tokens == 10
        denied = await rpc_error(reader_a.reserve("shared-name", tokens=1))
        assert (denied.code, denied.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED")
        assert denied.metadata == {"role": "writer"}
        not_admin = await rpc_error(writer_a.put_scope(pb.SCOPE_PROJECT, "p", max_tokens=1))
        assert not_admin.metadata == {"role": "admin"}
        await admin_a.put_scope(pb.SCOPE_PROJECT, "p", max_tokens=1)
        await writer_a.open_run("only-a")
        hidden = await rpc_error(as_("writer-b").get_run("only-a"))
        assert hidden.reason == "RUN_NOT_FOUND"
        anonymous = await rpc_error(Budget(channel).get_run("only-a"))
        assert anonymous.code == grpc.StatusCode.UNAUTHENTICATED


async def test_a_minute_pool_limits_tokens_per_minute_exactly(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        "rate",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_MINUTE,
        max_tokens=60,
    )
    await budget.open_run("r", project_id="rate")
    second = (await db.fetchval("SELECT now()")).second
    if second >= 50:  # start clear of a minute boundary, so the steps share one window
        await asyncio.sleep(61 - second)
    await budget.consume("r", tokens=60)
    spent = await rpc_error(budget.reserve("r", tokens=1))
    assert (spent.reason, spent.metadata["scopeId"]) == ("BUDGET_EXHAUSTED", "rate")
    retry = spent.require(error_details_pb2.RetryInfo).retry_delay.ToTimedelta()
    assert timedelta(0) < retry <= timedelta(minutes=1)  # until the next minute
    # Pretend that minute is over: its row moves one window back; the new minute is fresh.
    await db.execute(
        "UPDATE budget.pool_balances SET window_start = window_start - interval '1 minute'"
    )
    assert (await budget.reserve("r", tokens=60)).reservation.granted.tokens == 60
    starts = await db.fetch("SELECT window_start FROM budget.pool_balances ORDER BY 1")
    now = await db.fetchval("SELECT now()")
    assert starts[-1]["window_start"] == window_start(Window.MINUTE, now)
    assert len(starts) == 2


async def test_a_per_model_pool_limits_only_the_models_it_matches(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    # At most $5 a day on gpt-4o* for the project; nothing else limited.
    stored = await budget.put_scope(
        pb.SCOPE_PROJECT,
        "p",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        model_match="gpt-4o*",
        max_cost_nanos=5 * USD,
    )
    assert stored.model_match == "gpt-4o*"
    await budget.open_run("r", project_id="p")
    hold = await budget.reserve("r", model="gpt-4o-mini", cost_nanos=4 * USD)

    async def pools_of(reserved: pb.ReserveResponse) -> list[str]:
        found = await db.fetchval(
            "SELECT pool_scope_ids FROM budget.holds WHERE reservation_id = $1",
            reserved.reservation.reservation_id,
        )
        return list(found)

    assert await pools_of(hold) == ["p"]
    await budget.consume(
        "r", hold.reservation.reservation_id, model="gpt-4o-mini", cost_nanos=5 * USD
    )
    spent = await rpc_error(budget.reserve("r", model="gpt-4o", cost_nanos=1))
    assert (spent.reason, spent.metadata["scope"]) == ("BUDGET_EXHAUSTED", "project")
    other = await budget.reserve("r", model="claude-3", cost_nanos=100 * USD)
    assert other.reservation.granted.cost_nanos == 100 * USD
    assert await pools_of(other) == []  # the pool never held it
    await budget.consume("r", model="claude-3", cost_nanos=USD)  # nor counts its usage
    tools = await budget.reserve("r", model="", tool_calls=1)  # no model: a pool never applies
    assert await pools_of(tools) == []
    consumed = await db.fetchval("SELECT consumed_cost_nanos FROM budget.pool_balances")
    assert consumed == 5 * USD
    bad = await rpc_error(
        budget.put_scope(pb.SCOPE_PROJECT, "q", model_match="gpt-4o*", max_tokens=5)
    )
    violations = bad.require(error_details_pb2.BadRequest).field_violations
    assert (bad.reason, [v.field for v in violations]) == (
        "VALIDATION_FAILED",
        ["budget.model_match"],
    )


async def test_check_and_reserve_report_when_each_pool_window_ends(
    shared_budget_channel: grpc.aio.Channel, shared_db: asyncpg.Connection
) -> None:
    budget = Budget(shared_budget_channel)
    run, project, agent = new_id("r"), new_id("p"), new_id("a")
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        project,
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        max_tokens=9,
    )
    await budget.put_scope(pb.SCOPE_AGENT, agent, kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=9)
    await budget.open_run(run, project_id=project, agent_id=agent, max_tokens=100)
    now = await shared_db.fetchval("SELECT now()")
    midnight = window_start(Window.DAY, now) + timedelta(days=1)
    check = await budget.check(run, tokens=1)
    reserve = await budget.reserve(run, tokens=1)
    for dimensions in (check.dimensions, reserve.dimensions):
        ends = {
            (d.binding_scope, d.binding_scope_id): (
                d.window_end.ToDatetime(tzinfo=UTC) if d.HasField("window_end") else None
            )
            for d in dimensions
        }
        assert ends == {
            (pb.SCOPE_RUN, ""): None,  # the run's own balance has no window
            (pb.SCOPE_AGENT, agent): None,  # a window-less pool never renews
            (pb.SCOPE_PROJECT, project): midnight,
        }
