"""Bad input: INVALID_ARGUMENT VALIDATION_FAILED, one violation per bad field, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import asyncpg
import grpc
from google.rpc import error_details_pb2

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, policy, row_counts
from tests.support.errors import rpc_error

RID = "req-1"
LONG = "x" * 129


def open_run(**overrides: Any) -> pb.OpenRunRequest:
    fields: dict[str, Any] = dict(request_id=RID, run_id="new", project_id="p")
    fields.update(overrides)
    return pb.OpenRunRequest(**fields)


def reserve(**overrides: Any) -> pb.ReserveRequest:
    fields: dict[str, Any] = dict(
        request_id=RID, run_id="r", model="gpt-4o", estimate=pb.Amounts(tokens=1)
    )
    fields.update(overrides)
    return pb.ReserveRequest(**fields)


def consume(**overrides: Any) -> pb.ConsumeRequest:
    fields: dict[str, Any] = dict(
        request_id=RID, run_id="r", model="gpt-4o", usage=pb.Amounts(tokens=1)
    )
    fields.update(overrides)
    return pb.ConsumeRequest(**fields)


def scope(**overrides: Any) -> pb.PutScopeBudgetRequest:
    fields: dict[str, Any] = dict(
        scope=pb.SCOPE_PROJECT, scope_id="p", kind=pb.SCOPE_BUDGET_KIND_POOLED
    )
    fields.update(overrides)
    return pb.PutScopeBudgetRequest(request_id=RID, budget=pb.ScopeBudget(**fields))


CASES: list[tuple[str, str, Any, list[str]]] = [
    ("OpenRun", "negative", open_run(policy=policy(max_tokens=-5)), ["policy.max_tokens"]),
    (
        "OpenRun",
        "overflow",
        open_run(policy=policy(max_cost_nanos=2**63 - 1)),
        ["policy.max_cost_nanos"],
    ),
    (
        "OpenRun",
        "threshold 120",
        open_run(policy=policy(threshold_percent=120)),
        ["policy.threshold_percent"],
    ),
    ("OpenRun", "unknown enum", open_run(policy=policy(on_exhaustion=7)), ["policy.on_exhaustion"]),
    (
        "OpenRun",
        "limit and a nonsense glob",
        open_run(policy=policy(max_tokens=10, model_deny=["gpt 4"], model_allow=["[a-z]"])),
        ["policy.model_allow.patterns[0]", "policy.model_deny[0]"],
    ),
    ("OpenRun", "empty run id", open_run(run_id=""), ["run_id"]),
    ("OpenRun", "bad run id", open_run(run_id="a/b"), ["run_id"]),
    ("OpenRun", "oversized ids", open_run(run_id=LONG, agent_id=LONG), ["run_id", "agent_id"]),
    ("OpenRun", "missing project", open_run(project_id=""), ["project_id"]),
    ("OpenRun", "missing request id", open_run(request_id=""), ["request_id"]),
    ("OpenRun", "oversized request id", open_run(request_id=LONG), ["request_id"]),
    ("Reserve", "negative", reserve(estimate=pb.Amounts(tokens=-1)), ["estimate.tokens"]),
    (
        "Reserve",
        "overflow",
        reserve(estimate=pb.Amounts(cost_nanos=10**18 + 1)),
        ["estimate.cost_nanos"],
    ),
    ("Reserve", "nothing asked", reserve(estimate=pb.Amounts()), ["estimate"]),
    ("Reserve", "empty model", reserve(model=""), ["model"]),
    ("Reserve", "oversized model", reserve(model="m" * 201), ["model"]),
    ("Reserve", "ttl over the maximum", reserve(ttl_seconds=3601), ["ttl_seconds"]),
    ("Reserve", "negative ttl", reserve(ttl_seconds=-1), ["ttl_seconds"]),
    ("Reserve", "unknown mode", reserve(mode=9), ["mode"]),
    ("Reserve", "missing request id", reserve(request_id=""), ["request_id"]),
    ("Consume", "negative usage", consume(usage=pb.Amounts(cost_nanos=-5)), ["usage.cost_nanos"]),
    ("Consume", "overflowing usage", consume(usage=pb.Amounts(tokens=10**16)), ["usage.tokens"]),
    ("Consume", "model with space", consume(model="gpt 4o"), ["model"]),
    ("Consume", "oversized reservation", consume(reservation_id=LONG), ["reservation_id"]),
    (
        "CloseRun",
        "unspecified outcome",
        pb.CloseRunRequest(request_id=RID, run_id="r"),
        ["outcome"],
    ),
    (
        "CloseRun",
        "unknown outcome",
        pb.CloseRunRequest(request_id=RID, run_id="r", outcome=cast(pb.RunOutcome, 9)),
        ["outcome"],
    ),
    (
        "ResumeRun",
        "negative delta, no approver",
        pb.ResumeRunRequest(request_id=RID, run_id="r", delta=pb.Amounts(retries=-1)),
        ["delta.retries", "approver"],
    ),
    (
        "Release",
        "no reservation",
        pb.ReleaseRequest(request_id=RID, run_id="r"),
        ["reservation_id"],
    ),
    (
        "Check",
        "negative estimate",
        pb.CheckRequest(run_id="r", estimate=pb.Amounts(tool_calls=-1)),
        ["estimate.tool_calls"],
    ),
    (
        "ListRunEvents",
        "page and seq",
        pb.ListRunEventsRequest(run_id="r", after_seq=-1, page_size=5000),
        ["after_seq", "page_size"],
    ),
    (
        "ListRunEvents",
        "garbage token",
        pb.ListRunEventsRequest(run_id="r", page_token="%%%"),
        ["page_token"],
    ),
    (
        "PutScopeBudget",
        "unspecified scope and kind",
        scope(scope=0, kind=0),
        ["budget.scope", "budget.kind"],
    ),
    ("PutScopeBudget", "run scope", scope(scope=pb.SCOPE_RUN), ["budget.scope"]),
    ("PutScopeBudget", "unknown window", scope(window=9), ["budget.window"]),
    (
        "PutScopeBudget",
        "window on a per-run cap",
        scope(kind=pb.SCOPE_BUDGET_KIND_PER_RUN_CAP, window=pb.WINDOW_DAY),
        ["budget.window"],
    ),
    ("PutScopeBudget", "unknown enforcement", scope(enforcement=5), ["budget.enforcement"]),
    ("PutScopeBudget", "empty scope id", scope(scope_id=""), ["budget.scope_id"]),
    (
        "PutScopeBudget",
        "policy",
        scope(policy=policy(max_tool_calls=0, threshold_percent=101)),
        ["budget.policy.max_tool_calls", "budget.policy.threshold_percent"],
    ),
    (
        "GetScopeBudget",
        "unspecified scope",
        pb.GetScopeBudgetRequest(scope_id="p", kind=pb.SCOPE_BUDGET_KIND_POOLED),
        ["scope"],
    ),
    (
        "DeleteScopeBudget",
        "no request id",
        pb.DeleteScopeBudgetRequest(
            scope=pb.SCOPE_PROJECT, scope_id="p", kind=pb.SCOPE_BUDGET_KIND_POOLED
        ),
        ["request_id"],
    ),
]


async def test_bad_input_is_refused_with_field_violations_and_nothing_written(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    # One server and database for every case (starting one per case dominates the run time);
    # the row counts are compared around each call.
    budget = Budget(budget_channel)
    await budget.open_run("r", max_tokens=100)
    await budget.reserve("r", tokens=10)
    wrong: list[str] = []
    for method, name, request, fields in CASES:
        before = await row_counts(db)
        call: Callable[..., Any] = getattr(budget.stub, method)
        refused = await rpc_error(call(request))
        bad = refused.require(error_details_pb2.BadRequest)
        got = (refused.code, refused.reason, sorted(v.field for v in bad.field_violations))
        if got != (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED", sorted(fields)):
            wrong.append(f"{method} ({name}): {got}")
        if await row_counts(db) != before:
            wrong.append(f"{method} ({name}) wrote rows")
    assert not wrong, "\n".join(wrong)


async def test_a_watch_with_a_bad_after_seq_is_refused(budget_channel: grpc.aio.Channel) -> None:
    budget = Budget(budget_channel)
    stream = budget.stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id="r", after_seq=-3))
    refused = await rpc_error(stream.read())
    assert (refused.code, refused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
