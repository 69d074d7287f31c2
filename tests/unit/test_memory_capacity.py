"""The capacity contract: budget validation, growth table, refusal order and the error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_service.domain.capacity import (
    DIMENSION_ORDER,
    GROWTH,
    CapacityBudget,
    Dimension,
    Operation,
    Refusal,
    Usage,
    capacity_exceeded_error,
    check_growth,
    exceeded,
)
from servicekit.errors import ErrorKind, PreconditionDetail

BUDGET = CapacityBudget(max_active_entries=5, max_manifest_entries=8, max_manifest_bytes=2000)


def test_default_budget_is_the_contract_default_and_valid() -> None:
    budget = CapacityBudget()
    assert (budget.max_active_entries, budget.max_manifest_entries) == (5_000, 10_000)
    assert budget.max_manifest_bytes == 4_194_304
    assert budget.violations() == []


@pytest.mark.parametrize(
    ("budget", "fields"),
    [
        (CapacityBudget(max_active_entries=0), ["max_active_entries"]),
        (CapacityBudget(max_manifest_entries=0), ["max_manifest_entries", "max_active_entries"]),
        (CapacityBudget(max_active_entries=11, max_manifest_entries=10), ["max_active_entries"]),
        (CapacityBudget(max_manifest_bytes=1023), ["max_manifest_bytes"]),
        (CapacityBudget(max_active_entries=1, max_manifest_entries=1, max_manifest_bytes=1024), []),
    ],
)
def test_budget_violations_name_the_field(budget: CapacityBudget, fields: list[str]) -> None:
    assert [v.field for v in budget.violations()] == fields


def test_growth_table_matches_the_contract() -> None:
    assert GROWTH[Operation.APPEND] == set(Dimension)
    assert GROWTH[Operation.REVISE] == set(Dimension)
    assert GROWTH[Operation.REACTIVATE] == {Dimension.ACTIVE_ENTRIES}
    for relief in (Operation.FORGET, Operation.ORGANIZE, Operation.COMPACT):
        assert GROWTH[relief] == frozenset()
    assert set(GROWTH) == set(Operation)


def test_dimension_names_and_order() -> None:
    assert [str(d) for d in DIMENSION_ORDER] == [
        "manifest_bytes",
        "manifest_entries",
        "active_entries",
    ]


def test_append_within_budget_is_allowed() -> None:
    assert check_growth(Operation.APPEND, Usage(4, 7, 1900), Usage(5, 8, 2000), BUDGET) is None


def test_append_past_every_dimension_reports_manifest_bytes_first() -> None:
    refusal = check_growth(Operation.APPEND, Usage(5, 8, 2000), Usage(6, 9, 2223), BUDGET)
    assert refusal == Refusal(Dimension.MANIFEST_BYTES, 2000, 2223)


def test_append_past_entry_ceilings_reports_manifest_entries_before_active() -> None:
    refusal = check_growth(Operation.APPEND, Usage(5, 8, 1000), Usage(6, 9, 1200), BUDGET)
    assert refusal == Refusal(Dimension.MANIFEST_ENTRIES, 8, 9)


def test_append_past_active_ceiling_only() -> None:
    refusal = check_growth(Operation.APPEND, Usage(5, 6, 1000), Usage(6, 7, 1200), BUDGET)
    assert refusal == Refusal(Dimension.ACTIVE_ENTRIES, 5, 6)


def test_memory_over_a_lowered_budget_accepts_writes_that_do_not_worsen_the_breach() -> None:
    # bytes already over the limit and shrinking (a shorter reason): the breach is not worse
    base = Usage(3, 7, 2500)
    assert check_growth(Operation.REVISE, base, Usage(3, 7, 2400), BUDGET) is None
    assert check_growth(Operation.REVISE, base, Usage(3, 7, 2500), BUDGET) is None
    assert check_growth(Operation.REVISE, base, Usage(3, 7, 2501), BUDGET) == Refusal(
        Dimension.MANIFEST_BYTES, 2000, 2501
    )


def test_relief_is_never_refused_even_when_it_grows_bytes() -> None:
    base = Usage(9, 12, 5000)
    grown = Usage(9, 12, 6000)  # longer audit reasons than the base revision carried
    for relief in (Operation.FORGET, Operation.ORGANIZE, Operation.COMPACT):
        assert check_growth(relief, base, grown, BUDGET) is None


def test_reactivate_checks_active_entries_only() -> None:
    assert check_growth(Operation.REACTIVATE, Usage(4, 9, 2100), Usage(5, 9, 2200), BUDGET) is None
    assert check_growth(
        Operation.REACTIVATE, Usage(5, 9, 2100), Usage(6, 9, 2200), BUDGET
    ) == Refusal(Dimension.ACTIVE_ENTRIES, 5, 6)


def test_first_write_of_a_memory_compares_against_empty_usage() -> None:
    tiny = CapacityBudget(max_active_entries=1, max_manifest_entries=1, max_manifest_bytes=1024)
    assert check_growth(Operation.APPEND, None, Usage(2, 2, 700), tiny) == Refusal(
        Dimension.MANIFEST_ENTRIES, 1, 2
    )


def test_exceeded_lists_dimensions_in_the_fixed_order() -> None:
    assert exceeded(Usage(6, 9, 2001), BUDGET) == list(DIMENSION_ORDER)
    assert exceeded(Usage(6, 8, 2000), BUDGET) == [Dimension.ACTIVE_ENTRIES]
    assert exceeded(Usage(5, 8, 2000), BUDGET) == []


def test_capacity_exceeded_error_carries_dimension_limit_and_observed() -> None:
    error = capacity_exceeded_error(Refusal(Dimension.MANIFEST_BYTES, 4194304, 4194527))
    assert error.kind is ErrorKind.PRECONDITION
    assert error.reason == "MEMORY_CAPACITY_EXCEEDED"
    assert dict(error.metadata) == {
        "dimension": "manifest_bytes",
        "limit": "4194304",
        "observed": "4194527",
    }
    assert isinstance(error.detail, PreconditionDetail)
    assert (error.detail.type, error.detail.subject) == ("CAPACITY", "manifest_bytes")
    assert "4194527 > 4194304" in error.message


usages = st.builds(
    Usage,
    st.integers(0, 12),
    st.integers(0, 12),
    st.integers(0, 3000),
)


@given(st.sampled_from(list(Operation)), usages, usages)
def test_refusal_is_exactly_the_first_growing_dimension_past_its_limit(
    op: Operation, base: Usage, prepared: Usage
) -> None:
    refusal = check_growth(op, base, prepared, BUDGET)
    binding = [
        d
        for d in DIMENSION_ORDER
        if d in GROWTH[op]
        and prepared.value(d) > BUDGET.limit(d)
        and prepared.value(d) > base.value(d)
    ]
    if binding:
        first = binding[0]
        assert refusal == Refusal(first, BUDGET.limit(first), prepared.value(first))
    else:
        assert refusal is None
    assert check_growth(op, base, prepared, BUDGET) == refusal  # deterministic
