"""The budget tests' typed client over the stub, request builders, payload and row checks."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import asyncpg
import grpc
import jsonschema

from budget_service.domain.events import OPENWOP_PAYLOAD_SCHEMAS
from ration.budget.v1 import budget_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc
from tests.support.ids import new_id as new_id  # re-exported: the budget tests' request ids

USD = 10**9
READ_TIMEOUT = 20  # a bound on a hang, not a speed assertion
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


def policy(**fields: Any) -> pb.BudgetPolicy:
    allow = fields.pop("model_allow", None)
    message = pb.BudgetPolicy(**fields)
    if allow is not None:
        message.model_allow.CopyFrom(pb.ModelPatterns(patterns=allow))
    return message


class Budget:
    """A thin typed client over the stub: fresh request ids unless one is given."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()):
        self.stub = budget_service_pb2_grpc.BudgetServiceStub(channel)  # type: ignore[no-untyped-call]
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
        mode: pb.ReserveMode = pb.RESERVE_MODE_UNSPECIFIED,
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
        self, run_id: str, outcome: pb.RunOutcome = pb.RUN_OUTCOME_SUCCEEDED
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
        scope: pb.Scope,
        scope_id: str,
        kind: pb.ScopeBudgetKind = pb.SCOPE_BUDGET_KIND_PER_RUN_CAP,
        window: pb.Window = pb.WINDOW_UNSPECIFIED,
        enforcement: pb.Enforcement = pb.ENFORCEMENT_UNSPECIFIED,
        model_match: str = "",
        max_model_calls: int | None = None,
        **policy_fields: Any,
    ) -> pb.ScopeBudget:
        budget = pb.ScopeBudget(
            scope=scope,
            scope_id=scope_id,
            kind=kind,
            policy=policy(**policy_fields),
            window=window,
            enforcement=enforcement,
            model_match=model_match,
            max_model_calls=max_model_calls,
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


def as_dict(message: Any) -> Mapping[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, preserving_proto_field_name=True)


async def pool_events(budget: Budget, count: int) -> list[pb.WatchTenantEventsResponse]:
    """The first `count` threshold and exhaustion events of the tenant stream (a pool's own)."""
    request = pb.WatchTenantEventsRequest(
        filter=pb.TenantEventFilter(
            event_types=[
                pb.RUN_EVENT_TYPE_BUDGET_THRESHOLD_CROSSED,
                pb.RUN_EVENT_TYPE_BUDGET_EXHAUSTED,
            ]
        )
    )
    stream = budget.stub.WatchTenantEvents(request, metadata=budget.metadata)
    found: list[pb.WatchTenantEventsResponse] = []
    try:
        while len(found) < count:
            reply = await asyncio.wait_for(stream.read(), READ_TIMEOUT)
            assert reply is not grpc.aio.EOF
            if reply.HasField("event"):
                found.append(reply)
    finally:
        stream.cancel()
    return found


# The spend rollups (budget migrations 0013, 0016) a ledger should have: its consume rows summed
# per tenant, UTC hour, run owners and model, in key order; the rollups summed over their
# buckets (migration 0019) equal it. Inserted as is, every row lands in bucket 0. The oracle of
# the rollup tests.
ROLLUPS_OF_LEDGER = """
SELECT l.tenant_id, date_trunc('hour', l.created_at, 'UTC') AS hour, r.project_id,
    r.workflow_id, r.agent_id, coalesce(l.model, '') AS model, r.end_user_id, r.api_key_id,
    sha256(convert_to(r.tags::text, 'UTF8')) AS tags_sha256, r.tags,
    sum(l.consumed_cost_nanos) AS cost_nanos, sum(l.consumed_tokens) AS tokens,
    sum(l.consumed_tool_calls) AS tool_calls, sum(l.consumed_retries) AS retries,
    count(*) AS consume_count
FROM budget.ledger l JOIN budget.runs r ON r.tenant_id = l.tenant_id AND r.run_id = l.run_id
WHERE l.decision = 'consume'
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9"""
# The columns of a spend_rollups row but its bucket, in ROLLUPS_OF_LEDGER's order.
ROLLUP_COLUMNS = (
    "tenant_id, hour, project_id, workflow_id, agent_id, model, end_user_id, api_key_id,"
    " tags_sha256, tags, cost_nanos, tokens, tool_calls, retries, consume_count"
)
