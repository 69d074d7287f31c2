"""Converters: protobuf requests to validated commands and results back, losslessly."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest

from budget_service.api import requests as convert
from budget_service.api import responses as out
from budget_service.domain.policy import Dimension, Enforcement, OnExhaustion, Scope, Window
from budget_service.domain.records import StoredScopeBudget
from budget_service.domain.run_state import ReserveMode, RunOutcome
from ration.budget.v1 import budget_pb2 as pb
from servicekit.errors import BadRequestDetail, DomainError


def violations(error: DomainError) -> list[str]:
    assert isinstance(error.detail, BadRequestDetail)
    return [v.field for v in error.detail.violations]


def test_an_open_run_request_becomes_a_command_with_its_fingerprint_payload() -> None:
    request = pb.OpenRunRequest(
        request_id="q1",
        run_id="r1",
        project_id="p",
        policy=pb.BudgetPolicy(
            max_cost_nanos=0,
            model_allow=pb.ModelPatterns(patterns=[]),
            on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT,
        ),
    )
    mutation, command = convert.open_run(request)
    assert (mutation.method, mutation.request_id) == ("OpenRun", "q1")
    assert mutation.payload == request.SerializeToString(deterministic=True)
    policy = command.policy
    assert policy.max_cost_nanos == 0  # present and zero is a real limit
    assert policy.max_tokens is None  # absent is unbounded
    assert policy.model_allow == ()  # set and empty allows nothing
    assert policy.on_exhaustion is OnExhaustion.INTERRUPT


def test_unspecified_enums_take_documented_defaults_and_unknown_numbers_are_refused() -> None:
    _, command = convert.reserve(
        pb.ReserveRequest(request_id="q", run_id="r", model="m", estimate=pb.Amounts(tokens=1)),
        3600,
    )
    assert command.mode is ReserveMode.ALL_OR_NOTHING
    with pytest.raises(DomainError) as refused:
        convert.close_run(
            pb.CloseRunRequest(request_id="q", run_id="r", outcome=cast(pb.RunOutcome, 42))
        )
    assert violations(refused.value) == ["outcome"]
    _, closed = convert.close_run(
        pb.CloseRunRequest(request_id="q", run_id="r", outcome=pb.RUN_OUTCOME_FAILED)
    )
    assert closed.outcome is RunOutcome.FAILED


def test_scope_budgets_round_trip() -> None:
    request = pb.PutScopeBudgetRequest(
        request_id="q",
        budget=pb.ScopeBudget(
            scope=pb.SCOPE_AGENT,
            scope_id="a",
            kind=pb.SCOPE_BUDGET_KIND_POOLED,
            policy=pb.BudgetPolicy(max_tool_calls=3, model_deny=["x-*"]),
            window=pb.WINDOW_WEEK,
            enforcement=pb.ENFORCEMENT_ADVISORY,
        ),
    )
    _, budget = convert.scope_budget(request)
    assert (budget.scope, budget.window, budget.enforcement) == (
        Scope.AGENT,
        Window.WEEK,
        Enforcement.ADVISORY,
    )
    back = out.scope_budget(StoredScopeBudget(budget, 4, datetime(2026, 1, 1, tzinfo=UTC)))
    expected = pb.ScopeBudget()
    expected.CopyFrom(request.budget)
    expected.version = 4
    expected.updated_at.FromDatetime(datetime(2026, 1, 1, tzinfo=UTC))
    expected.policy.on_exhaustion = pb.ON_EXHAUSTION_FAIL  # the default, made explicit
    assert back == expected


def test_a_time_report_resumes_only_after_a_bucket() -> None:
    """A DAY or HOUR page resumes after a bucket start (the store walks buckets from it): a
    token of the same report with any other key is refused, as a token of another report."""
    request = pb.ReportSpendRequest(group_by=pb.SPEND_GROUP_BY_HOUR, page_size=1)
    request.start_time.FromDatetime(datetime(2025, 3, 1, tzinfo=UTC))
    request.end_time.FromDatetime(datetime(2025, 3, 2, tzinfo=UTC))
    query, _, _ = convert.report_spend(request)
    for key, resumes in (("2025-03-01T05:00:00Z", True), ("gpt-4o", False), ("", False)):
        request.page_token = convert.spend_page_token(query, key)
        if resumes:
            assert convert.report_spend(request)[1] == key
            continue
        with pytest.raises(DomainError) as refused:
            convert.report_spend(request)
        assert violations(refused.value) == ["page_token"]


def test_page_tokens_belong_to_one_run() -> None:
    token = convert.page_token("r1", 42)
    assert convert.list_events(pb.ListRunEventsRequest(run_id="r1", page_token=token)) == (
        "r1",
        42,
        convert.DEFAULT_PAGE_SIZE,
    )
    with pytest.raises(DomainError) as refused:
        convert.list_events(pb.ListRunEventsRequest(run_id="r2", page_token=token))
    assert violations(refused.value) == ["page_token"]


def test_amounts_map_every_dimension() -> None:
    amounts = {
        Dimension.TOKENS: 1,
        Dimension.COST: 2,
        Dimension.TOOL_CALLS: 3,
        Dimension.RETRIES: 4,
    }
    assert out.amounts(amounts) == pb.Amounts(tokens=1, cost_nanos=2, tool_calls=3, retries=4)
