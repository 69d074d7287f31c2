"""Budget policy: validation, glob matching, model verdicts, scope resolution and pool windows."""

from __future__ import annotations

import fnmatch
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budget_service.domain.input_rules import (
    validate_amounts,
    validate_model_id,
    validate_policy,
    validate_scope_budget,
)
from budget_service.domain.policy import (
    DEFAULT_THRESHOLD_PERCENT,
    HOST,
    WINDOW_EPOCH,
    BudgetPolicy,
    Dimension,
    EffectiveBudget,
    HostCeilings,
    ModelLists,
    ModelVerdict,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
    glob_matches,
    model_verdict,
    resolve_effective_budget,
)
from budget_service.domain.refusals import model_denied_error
from servicekit.errors import ErrorKind, FieldViolation, PreconditionDetail
from tests.support.windows import window_start

USD = 10**9


def fields(violations: list[FieldViolation]) -> list[str]:
    return [v.field for v in violations]


def per_run(scope: Scope, policy: BudgetPolicy, scope_id: str = "s1") -> ScopeBudget:
    return ScopeBudget(scope, scope_id, ScopeBudgetKind.PER_RUN, policy)


# --- validation ------------------------------------------------------------------------------


def test_an_empty_policy_is_valid_and_unbounded() -> None:
    policy = BudgetPolicy()
    assert validate_policy(policy) == []
    assert all(policy.limit(d) is None for d in Dimension)


def test_a_full_policy_at_its_bounds_is_valid() -> None:
    policy = BudgetPolicy(
        max_tokens=1,
        max_cost_nanos=0,
        max_tool_calls=1,
        max_retries=0,
        model_allow=("claude-*", "gpt-4o"),
        model_deny=("gpt-4-32k",),
        threshold_percent=100,
        on_exhaustion=OnExhaustion.INTERRUPT,
    )
    assert validate_policy(policy) == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (BudgetPolicy(max_tokens=0), ["policy.max_tokens"]),
        (BudgetPolicy(max_cost_nanos=-1), ["policy.max_cost_nanos"]),
        (BudgetPolicy(max_tool_calls=0), ["policy.max_tool_calls"]),
        (BudgetPolicy(max_retries=-1), ["policy.max_retries"]),
        (BudgetPolicy(max_tokens=10**15 + 1), ["policy.max_tokens"]),
        (BudgetPolicy(max_cost_nanos=2**63), ["policy.max_cost_nanos"]),
        (BudgetPolicy(max_retries=True), ["policy.max_retries"]),
        (BudgetPolicy(threshold_percent=101), ["policy.threshold_percent"]),
        (BudgetPolicy(threshold_percent=-1), ["policy.threshold_percent"]),
        (BudgetPolicy(model_allow=("ok", "")), ["policy.model_allow[1]"]),
        (BudgetPolicy(model_deny=("a b",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("tab\there",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("bell\x07",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("gpt-[45]",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("gpt-?",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("modèle",)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_deny=("x" * 201,)), ["policy.model_deny[0]"]),
        (BudgetPolicy(model_allow=("a", "b", "a")), ["policy.model_allow[2]"]),
        (
            BudgetPolicy(max_tokens=0, threshold_percent=200),
            ["policy.max_tokens", "policy.threshold_percent"],
        ),
    ],
)
def test_validation_names_each_bad_field(policy: BudgetPolicy, expected: list[str]) -> None:
    assert fields(validate_policy(policy)) == expected


def test_glob_list_longer_than_64_is_refused_at_the_list() -> None:
    policy = BudgetPolicy(model_deny=tuple(f"m{i}" for i in range(65)))
    assert fields(validate_policy(policy)) == ["policy.model_deny"]
    assert validate_policy(BudgetPolicy(model_deny=tuple(f"m{i}" for i in range(64)))) == []


def test_every_allowed_glob_character_is_accepted() -> None:
    glob = "Az09._:/@+-*"
    assert validate_policy(BudgetPolicy(model_allow=(glob,), model_deny=("x" * 200,))) == []


def test_validation_prefix_is_configurable() -> None:
    bad = BudgetPolicy(max_tokens=0)
    assert fields(validate_policy(bad, "run.budget")) == ["run.budget.max_tokens"]
    assert fields(validate_policy(bad, "")) == ["max_tokens"]


@pytest.mark.parametrize(
    ("model", "ok"),
    [
        ("claude-3-5-sonnet@20240620", True),
        ("accounts/fireworks/models/llama-v3", True),
        ("", False),
        ("x" * 201, False),
        ("x" * 200, True),
        ("has space", False),
        ("nl\n", False),
        ("nul\x00", False),
    ],
)
def test_model_id_validation(model: str, ok: bool) -> None:
    found = validate_model_id(model)
    assert (found == []) is ok
    assert all(v.field == "model" for v in found)


def test_amount_validation_uses_request_field_names() -> None:
    amounts = {Dimension.TOKENS: -1, Dimension.COST: 10**18 + 1, Dimension.TOOL_CALLS: 1}
    assert fields(validate_amounts(amounts, "estimate")) == [
        "estimate.tokens",
        "estimate.cost_nanos",
    ]
    assert validate_amounts({Dimension.RETRIES: 0}, "usage") == []


def test_scope_budget_validation() -> None:
    ok = ScopeBudget(Scope.PROJECT, "p1", ScopeBudgetKind.POOLED, BudgetPolicy(), Window.MONTH)
    assert validate_scope_budget(ok) == []
    bad = ScopeBudget(
        Scope.RUN, "", ScopeBudgetKind.PER_RUN, BudgetPolicy(max_tokens=0), Window.DAY
    )
    assert fields(validate_scope_budget(bad, "budget")) == [
        "budget.scope",
        "budget.scope_id",
        "budget.window",
        "budget.policy.max_tokens",
    ]


# --- glob matching ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "model", "matches"),
    [
        ("gpt-4-32k", "gpt-4-32k", True),
        ("gpt-4-32k", "gpt-4-32k-0613", False),
        ("claude-*", "claude-3-opus", True),
        ("claude-*", "claude-", True),
        ("claude-*", "Claude-3", False),
        ("*", "", True),
        ("*", "any/thing", True),
        ("*/llama-*", "accounts/fireworks/models/llama-v3", True),
        ("a*b*c", "abc", True),
        ("a*b*c", "aXbYc", True),
        ("a*b*c", "acb", False),
        ("ab*ba", "aba", False),
        ("ab*ba", "abba", True),
        ("*-mini", "gpt-4o-mini", True),
        ("gpt-?", "gpt-4", False),
        ("gpt-?", "gpt-?", True),
        ("m[1]", "m1", False),
        ("m[1]", "m[1]", True),
    ],
)
def test_glob_matching(pattern: str, model: str, matches: bool) -> None:
    assert glob_matches(pattern, model) is matches


_ALPHABET = "ab*/-"


@given(st.text(_ALPHABET, max_size=8), st.text(_ALPHABET.replace("*", ""), max_size=10))
def test_glob_matching_agrees_with_a_regex_where_only_star_is_special(
    pattern: str, model: str
) -> None:
    regex = "".join(".*" if c == "*" else re.escape(c) for c in pattern)
    assert glob_matches(pattern, model) is (re.fullmatch(regex, model, re.DOTALL) is not None)
    # fnmatch agrees on this alphabet, which has no `[`, `]` or `?`.
    assert glob_matches(pattern, model) is fnmatch.fnmatchcase(model, pattern)


# --- model verdicts --------------------------------------------------------------------------


def test_no_lists_allow_everything() -> None:
    assert model_verdict("any", []) == ModelVerdict(True)


def test_deny_wins_over_allow_in_any_scope() -> None:
    lists = [
        ModelLists(Scope.RUN, ("gpt-*",)),
        ModelLists(Scope.PROJECT, None, ("gpt-4-32k",)),
    ]
    assert model_verdict("gpt-4-32k", lists) == ModelVerdict(False, Scope.PROJECT)
    assert model_verdict("gpt-4o", lists) == ModelVerdict(True)


def test_deny_reports_the_narrowest_denying_scope() -> None:
    lists = [ModelLists(Scope.PROJECT, None, ("*",)), ModelLists(Scope.AGENT, None, ("m",))]
    assert model_verdict("m", lists) == ModelVerdict(False, Scope.AGENT)


def test_every_declared_allow_list_must_match() -> None:
    lists = [
        ModelLists(Scope.WORKFLOW, ("claude-*", "gpt-*")),
        ModelLists(Scope.PROJECT, ("claude-*",)),
    ]
    assert model_verdict("claude-3", lists).allowed
    assert model_verdict("gpt-4o", lists) == ModelVerdict(False, Scope.PROJECT)
    assert model_verdict("llama", lists) == ModelVerdict(False, Scope.WORKFLOW)


def test_an_empty_allow_list_allows_nothing_but_no_list_allows_all() -> None:
    assert model_verdict("m", [ModelLists(Scope.RUN, ())]) == ModelVerdict(False, Scope.RUN)
    assert model_verdict("m", [ModelLists(Scope.RUN, None)]) == ModelVerdict(True)


def test_model_denied_error_names_model_and_scope() -> None:
    error = model_denied_error("gpt-4-32k", Scope.PROJECT, "acme")
    assert (error.kind, error.reason) == (ErrorKind.PRECONDITION, "BUDGET_MODEL_DENIED")
    assert error.metadata == {"model": "gpt-4-32k", "scope": "project", "scopeId": "acme"}
    assert isinstance(error.detail, PreconditionDetail)


# --- resolution ------------------------------------------------------------------------------


def test_run_overlay_alone_resolves_to_itself_with_defaults() -> None:
    budget = resolve_effective_budget(BudgetPolicy(max_cost_nanos=USD))
    assert budget.max_cost_nanos == USD
    assert budget.max_tokens is None
    assert budget.threshold_percent == DEFAULT_THRESHOLD_PERCENT == 80
    assert budget.on_exhaustion is OnExhaustion.FAIL
    assert dict(budget.binding) == {Dimension.COST: "run"}
    assert budget.scope is Scope.RUN


def test_each_dimension_is_the_minimum_over_run_and_per_run_caps() -> None:
    run = BudgetPolicy(max_tokens=1000, max_cost_nanos=5 * USD, threshold_percent=50)
    caps = [
        per_run(Scope.PROJECT, BudgetPolicy(max_tokens=500, max_tool_calls=10)),
        per_run(Scope.AGENT, BudgetPolicy(max_cost_nanos=2 * USD, max_tokens=800)),
        per_run(Scope.WORKFLOW, BudgetPolicy(max_retries=3, threshold_percent=10)),
    ]
    budget = resolve_effective_budget(run, caps)
    assert [budget.limit(d) for d in Dimension] == [500, 2 * USD, 10, 3]
    assert dict(budget.binding) == {
        Dimension.TOKENS: "project",
        Dimension.COST: "agent",
        Dimension.TOOL_CALLS: "project",
        Dimension.RETRIES: "workflow",
    }
    assert budget.threshold_percent == 50  # from the run overlay, never from a scope
    assert budget.scope is Scope.WORKFLOW  # the narrowest scope that binds anything


def test_ties_bind_the_narrowest_scope() -> None:
    caps = [per_run(Scope.PROJECT, BudgetPolicy(max_tokens=100))]
    budget = resolve_effective_budget(BudgetPolicy(max_tokens=100), caps)
    assert budget.binding[Dimension.TOKENS] == "run"


def test_host_ceilings_clamp_tokens_and_cost_only() -> None:
    ceilings = HostCeilings(max_tokens=5_000_000, max_cost_nanos=100 * USD)
    run = BudgetPolicy(max_tokens=10_000_000, max_cost_nanos=USD, max_tool_calls=5)
    budget = resolve_effective_budget(run, [], ceilings)
    assert (budget.max_tokens, budget.max_cost_nanos, budget.max_tool_calls) == (5_000_000, USD, 5)
    assert budget.binding[Dimension.TOKENS] == HOST
    assert budget.binding[Dimension.COST] == "run"
    unbounded = resolve_effective_budget(BudgetPolicy(), [], ceilings)
    assert (unbounded.max_tokens, unbounded.max_cost_nanos) == (5_000_000, 100 * USD)
    assert unbounded.max_retries is None
    assert unbounded.scope is Scope.RUN  # OpenWOP's scope enum has no "host"


def test_pooled_budgets_do_not_cap_the_run_but_their_model_lists_count() -> None:
    pool = ScopeBudget(
        Scope.PROJECT,
        "p1",
        ScopeBudgetKind.POOLED,
        BudgetPolicy(max_tokens=10, model_deny=("gpt-4-32k",)),
        Window.DAY,
    )
    budget = resolve_effective_budget(BudgetPolicy(model_allow=("gpt-*",)), [pool])
    assert budget.max_tokens is None
    assert budget.model_lists == (
        ModelLists(Scope.RUN, ("gpt-*",), ()),
        ModelLists(Scope.PROJECT, None, ("gpt-4-32k",)),
    )
    assert model_verdict("gpt-4-32k", budget.model_lists) == ModelVerdict(False, Scope.PROJECT)


def test_a_declared_empty_allow_list_survives_resolution() -> None:
    budget = resolve_effective_budget(
        BudgetPolicy(), [per_run(Scope.AGENT, BudgetPolicy(model_allow=()))]
    )
    assert budget.model_lists == (ModelLists(Scope.AGENT, (), ()),)
    assert not model_verdict("anything", budget.model_lists).allowed


def test_effective_budget_is_hashable_and_comparable() -> None:
    a = resolve_effective_budget(BudgetPolicy(max_tokens=5))
    assert a == EffectiveBudget(max_tokens=5, binding={Dimension.TOKENS: "run"})
    assert hash(a) == hash(EffectiveBudget(max_tokens=5))


# --- windows ---------------------------------------------------------------------------------

NOW = datetime(2026, 5, 29, 17, 45, 12, 123456, tzinfo=UTC)  # a Friday


@pytest.mark.parametrize(
    ("window", "start"),
    [
        (Window.NONE, datetime(1970, 1, 1, tzinfo=UTC)),
        (Window.DAY, datetime(2026, 5, 29, tzinfo=UTC)),
        (Window.WEEK, datetime(2026, 5, 25, tzinfo=UTC)),
        (Window.MONTH, datetime(2026, 5, 1, tzinfo=UTC)),
    ],
)
def test_window_start(window: Window, start: datetime) -> None:
    assert window_start(window, NOW) == start
    assert window_start(window, start) == start  # the start belongs to its own window


def test_window_start_is_computed_in_utc() -> None:
    # 01:30 on 1 June in UTC+3 is still 31 May (a Sunday) in UTC.
    local = datetime(2026, 6, 1, 1, 30, tzinfo=timezone(timedelta(hours=3)))
    assert window_start(Window.DAY, local) == datetime(2026, 5, 31, tzinfo=UTC)
    assert window_start(Window.WEEK, local) == datetime(2026, 5, 25, tzinfo=UTC)
    assert window_start(Window.MONTH, local) == datetime(2026, 5, 1, tzinfo=UTC)
    assert window_start(Window.NONE, local) == WINDOW_EPOCH


def test_window_start_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        window_start(Window.DAY, datetime(2026, 1, 1))


@given(
    st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)),
    st.sampled_from(list(Window)),
)
def test_window_start_is_at_or_before_now_and_idempotent(now: datetime, window: Window) -> None:
    start = window_start(window, now)
    assert start <= now
    assert window_start(window, start) == start
    if window is Window.WEEK:
        assert start.weekday() == 0
        assert now - start < timedelta(days=7)
