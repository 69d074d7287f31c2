"""Request-level validation rules: ids, idempotency keys, hold lifetimes and paging."""

from __future__ import annotations

import pytest

from budget_service.domain.input_rules import (
    MAX_PAGE_SIZE,
    validate_id,
    validate_optional_id,
    validate_page,
    validate_request_id,
    validate_run_id,
    validate_ttl,
)
from servicekit.errors import FieldViolation


def fields(violations: list[FieldViolation]) -> list[str]:
    return [v.field for v in violations]


@pytest.mark.parametrize(
    ("run_id", "ok"),
    [
        ("run-2026.01:a_b", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a/b", False),
        ("a b", False),
        ("ünï", False),
        ("tab\t", False),
    ],
)
def test_run_ids_are_short_and_url_safe(run_id: str, ok: bool) -> None:
    assert (validate_run_id(run_id) == []) is ok


def test_request_ids_are_required_and_bounded() -> None:
    assert validate_request_id("018f3c4e-7b1a-7c2d-9e0f-a1b2c3d4e5f6") == []
    missing = validate_request_id("")
    assert fields(missing) == ["request_id"]
    assert "required" in missing[0].description
    assert fields(validate_request_id("r" * 129)) == ["request_id"]


def test_scope_and_owner_ids_allow_any_printable_text_up_to_128() -> None:
    assert validate_id("team/agents@prod", "project_id") == []
    assert fields(validate_id("p" * 129, "project_id")) == ["project_id"]
    assert validate_optional_id("", "agent_id") == []
    assert fields(validate_optional_id("has space", "agent_id")) == ["agent_id"]


def test_ttl_zero_means_default_and_never_exceeds_the_host_maximum() -> None:
    assert validate_ttl(0, 3600) == []
    assert validate_ttl(3600, 3600) == []
    assert fields(validate_ttl(3601, 3600)) == ["ttl_seconds"]
    assert fields(validate_ttl(-1, 3600)) == ["ttl_seconds"]


def test_paging_bounds() -> None:
    assert validate_page(0, 0) == []
    assert validate_page(10, MAX_PAGE_SIZE) == []
    assert fields(validate_page(-1, MAX_PAGE_SIZE + 1)) == ["after_seq", "page_size"]
