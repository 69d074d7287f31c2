"""Shared helpers of the budget tests: a typed client, scenarios, payload checks, DB checks."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg
import grpc
import jsonschema
from rpc_errors import RpcErrorDetails, decode

from budget_service.domain.events import OPENWOP_PAYLOAD_SCHEMAS
from ration.budget.v1 import budget_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc

USD = 10**9
BUDGET_TABLES = (
    "runs",
    "scope_budgets",
    "pool_balances",
    "holds",
    "ledger",
    "events",
    "request_log",
)
# Key names that would leak pricing or credentials into an event (budget-no-pricing-leak).
FORBIDDEN_KEY = re.compile(
    r"price|rate|per_?token|per_?unit|card|credential|secret|password|api_?key|bearer|auth",
    re.IGNORECASE,
)


def new_id(prefix: str = "req") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def policy(**fields: Any) -> pb.BudgetPolicy:
    allow = fields.pop("model_allow", None)
    message = pb.BudgetPolicy(**fields)
    if allow is not None:
        message.model_allow.CopyFrom(pb.ModelPatterns(patterns=allow))
    return message


class Budget:
    """A thin typed client over the stub: fresh request ids unless one is given."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()):
        self.stub = budget_service_pb2_grpc.BudgetServiceStub(channel)
        self.metadata = metadata

    async def open_run(
        self,
        run_id: str,
        project_id: str = "proj",
        request_id: str | None = None,
        workflow_id: str = "",
        agent_id: str = "",
        **policy_fields: Any,
    ) -> pb.Run:
        reply = await self.stub.OpenRun(
            pb.OpenRunRequest(
                request_id=request_id or new_id(),
                run_id=run_id,
                project_id=project_id,
                workflow_id=workflow_id,
                agent_id=agent_id,
                policy=policy(**policy_fields),
            ),
            metadata=self.metadata,
        )
        return reply.run

    async def reserve(
        self,
        run_id: str,
        model: str = "gpt-4o",
        request_id: str | None = None,
        ttl_seconds: int = 0,
        mode: int = 0,
        **estimate: int,
    ) -> pb.ReserveResponse:
        return await self.stub.Reserve(
            pb.ReserveRequest(
                request_id=request_id or new_id(),
                run_id=run_id,
                model=model,
                estimate=pb.Amounts(**estimate),
                ttl_seconds=ttl_seconds,
                mode=mode,
            ),
            metadata=self.metadata,
        )

    async def consume(
        self,
        run_id: str,
        reservation_id: str = "",
        model: str = "gpt-4o",
        request_id: str | None = None,
        **usage: int,
    ) -> pb.ConsumeResponse:
        return await self.stub.Consume(
            pb.ConsumeRequest(
                request_id=request_id or new_id(),
                run_id=run_id,
                reservation_id=reservation_id,
                model=model,
                usage=pb.Amounts(**usage),
            ),
            metadata=self.metadata,
        )

    async def release(self, run_id: str, reservation_id: str) -> pb.ReleaseResponse:
        return await self.stub.Release(
            pb.ReleaseRequest(request_id=new_id(), run_id=run_id, reservation_id=reservation_id),
            metadata=self.metadata,
        )

    async def close(
        self, run_id: str, outcome: int = pb.RUN_OUTCOME_SUCCEEDED
    ) -> pb.CloseRunResponse:
        return await self.stub.CloseRun(
            pb.CloseRunRequest(request_id=new_id(), run_id=run_id, outcome=outcome),
            metadata=self.metadata,
        )

    async def resume(self, run_id: str, approver: str = "ops@example.com", **delta: int) -> pb.Run:
        reply = await self.stub.ResumeRun(
            pb.ResumeRunRequest(
                request_id=new_id(), run_id=run_id, delta=pb.Amounts(**delta), approver=approver
            ),
            metadata=self.metadata,
        )
        return reply.run

    async def check(self, run_id: str, model: str = "", **estimate: int) -> pb.CheckResponse:
        return await self.stub.Check(
            pb.CheckRequest(run_id=run_id, model=model, estimate=pb.Amounts(**estimate)),
            metadata=self.metadata,
        )

    async def get_run(self, run_id: str) -> pb.Run:
        return (await self.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self.metadata)).run

    async def put_scope(
        self,
        scope: int,
        scope_id: str,
        kind: int = pb.SCOPE_BUDGET_KIND_PER_RUN_CAP,
        window: int = 0,
        enforcement: int = 0,
        **policy_fields: Any,
    ) -> pb.ScopeBudget:
        budget = pb.ScopeBudget(
            scope=scope,
            scope_id=scope_id,
            kind=kind,
            policy=policy(**policy_fields),
            window=window,
            enforcement=enforcement,
        )
        reply = await self.stub.PutScopeBudget(
            pb.PutScopeBudgetRequest(request_id=new_id(), budget=budget), metadata=self.metadata
        )
        return reply.budget

    async def events(self, run_id: str, after_seq: int = 0) -> list[pb.RunEvent]:
        """Every event after `after_seq`, through every page, each payload checked."""
        found: list[pb.RunEvent] = []
        token = ""
        while True:
            reply = await self.stub.ListRunEvents(
                pb.ListRunEventsRequest(
                    run_id=run_id, after_seq=after_seq, page_size=3, page_token=token
                ),
                metadata=self.metadata,
            )
            found += reply.events
            token = reply.next_page_token
            if not token:
                break
        for event in found:
            assert_openwop_payload(event.type, event.payload_json)
        return found

    async def trace(self, run_id: str, after_seq: int = 0) -> list[tuple[str, dict[str, Any]]]:
        return [(e.type, json.loads(e.payload_json)) for e in await self.events(run_id, after_seq)]


async def rpc_error(call: Awaitable[Any]) -> RpcErrorDetails:
    """The decoded status of a call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return decode(error)
    raise AssertionError("the call succeeded but should have failed")


async def attempt(call: Awaitable[Any]) -> None:
    """A call that may be refused (hard mode) or granted (advisory): scenarios run in both."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        await call


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for key, item in value.items() for k in (key, *_keys(item))]
    if isinstance(value, list):
        return [k for item in value for k in _keys(item)]
    return []


def leaking_keys(payload_json: str) -> list[str]:
    """Keys, at any depth, that name a price, rate or credential."""
    return [k for k in _keys(json.loads(payload_json)) if FORBIDDEN_KEY.search(k)]


def assert_openwop_payload(event_type: str, payload_json: str) -> None:
    """Validates against the closed OpenWOP v1 shape and the no-pricing-leak invariant."""
    leaking = leaking_keys(payload_json)
    assert not leaking, f"{event_type} payload names pricing or credentials: {leaking}"
    jsonschema.validate(json.loads(payload_json), OPENWOP_PAYLOAD_SCHEMAS[event_type])


async def row_counts(db: asyncpg.Connection) -> dict[str, int]:
    return {t: await db.fetchval(f"SELECT count(*) FROM budget.{t}") for t in BUDGET_TABLES}


async def assert_ledger_matches_balances(db: asyncpg.Connection) -> None:
    """Summing the ledger's deltas gives every run's and every pool's consumed and held, and
    held equals the open holds; no hold ended twice."""
    suffixes = ("tokens", "cost_nanos", "tool_calls", "retries")
    cols = ", ".join(f"sum(consumed_{s}) AS c_{s}, sum(held_{s}) AS h_{s}" for s in suffixes)
    runs = await db.fetch("SELECT * FROM budget.runs")
    for run in runs:
        totals = await db.fetchrow(
            f"SELECT {cols} FROM budget.ledger WHERE tenant_id = $1 AND run_id = $2",
            run["tenant_id"],
            run["run_id"],
        )
        holds = await db.fetchrow(
            "SELECT "
            + ", ".join(f"coalesce(sum(granted_{s}), 0) AS g_{s}" for s in suffixes)
            + " FROM budget.holds WHERE tenant_id = $1 AND run_id = $2 AND state = 'open'",
            run["tenant_id"],
            run["run_id"],
        )
        for s in suffixes:
            assert (totals[f"c_{s}"] or 0) == run[f"consumed_{s}"], (run["run_id"], s)
            assert (totals[f"h_{s}"] or 0) == run[f"held_{s}"], (run["run_id"], s)
            assert holds[f"g_{s}"] == run[f"held_{s}"], (run["run_id"], s)
    pools = await db.fetch("SELECT * FROM budget.pool_balances")
    for pool in pools:
        totals = await db.fetchrow(
            f"SELECT {cols} FROM budget.ledger l WHERE l.tenant_id = $1 AND l.pools @> $2::jsonb",
            pool["tenant_id"],
            json.dumps(
                [
                    {
                        "scope": pool["scope"],
                        "scope_id": pool["scope_id"],
                        "window_start": pool["window_start"].isoformat(),
                    }
                ]
            ),
        )
        for s in suffixes:
            assert (totals[f"c_{s}"] or 0) == pool[f"consumed_{s}"], (pool["scope_id"], s)
            assert (totals[f"h_{s}"] or 0) == pool[f"held_{s}"], (pool["scope_id"], s)
    twice = await db.fetchval(
        "SELECT count(*) FROM (SELECT reservation_id FROM budget.ledger"
        " WHERE decision IN ('consume', 'release', 'expire') AND reservation_id IS NOT NULL"
        " AND (held_tokens < 0 OR held_cost_nanos < 0 OR held_tool_calls < 0"
        " OR held_retries < 0 OR decision <> 'consume')"
        " GROUP BY tenant_id, run_id, reservation_id HAVING count(*) > 1) t"
    )
    assert twice == 0, "a hold ended more than once"


# --- scenarios: every event type in hard and advisory mode, re-run by the payload walker ----

Scenario = Callable[[Budget], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


@scenario
async def rfc_cost_trace(budget: Budget) -> None:
    """RFC 0084: max cost 1.00 USD at 80%: consumes of 0.50, 0.30 and 0.22."""
    await budget.open_run("cost-run", max_cost_nanos=USD, threshold_percent=80)
    for cost in (500_000_000, 300_000_000, 220_000_000):
        await budget.consume("cost-run", cost_nanos=cost)


@scenario
async def rfc_tool_call_trace(budget: Budget) -> None:
    """RFC 0084: max tool calls 2 at 50%; the third tool-call Reserve breaches."""
    await budget.open_run("tool-run", max_tool_calls=2, threshold_percent=50)
    for _ in range(2):
        hold = await budget.reserve("tool-run", tool_calls=1)
        await budget.consume("tool-run", hold.reservation.reservation_id, tool_calls=1)
    await attempt(budget.reserve("tool-run", tool_calls=1))


@scenario
async def interrupt_and_resume(budget: Budget) -> None:
    """INTERRUPT on a token breach, then ResumeRun raises the limit and the run goes on."""
    await budget.open_run("int-run", max_tokens=100, max_retries=1, on_exhaustion=2)
    await budget.consume("int-run", tokens=120, retries=1)
    # Only an INTERRUPTED run can be resumed: advisory mode never interrupts one.
    if (await budget.get_run("int-run")).state == pb.RUN_STATE_INTERRUPTED:
        await budget.resume("int-run", tokens=200)
    hold = await budget.reserve("int-run", tokens=50)
    await budget.consume("int-run", hold.reservation.reservation_id, tokens=50)


@scenario
async def pooled_scopes_and_host_ceiling(budget: Budget) -> None:
    """Scope caps bind the effective budget; the pool is shared and breached by a run."""
    await budget.put_scope(pb.SCOPE_PROJECT, "pooled", max_tokens=500, max_retries=3)
    await budget.put_scope(
        pb.SCOPE_PROJECT,
        "pooled",
        kind=pb.SCOPE_BUDGET_KIND_POOLED,
        window=pb.WINDOW_DAY,
        max_cost_nanos=2 * USD,
    )
    for run_id in ("pool-a", "pool-b"):
        await budget.open_run(run_id, project_id="pooled", max_tokens=1000, threshold_percent=0)
        await budget.consume(run_id, tokens=10, cost_nanos=USD)
    await attempt(budget.reserve("pool-a", cost_nanos=1))


async def run_everything(budget: Budget) -> None:
    for function in SCENARIOS.values():
        await function(budget)


def as_dict(message: Any) -> Mapping[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, preserving_proto_field_name=True)
