"""Token roles and principals: `approver` approves only; a principal names the caller."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from servicekit.auth import DEV_IDENTITY, Identity, TokenTable
from servicekit.errors import DomainError
from servicekit.settings import SettingsError


def reservations(roles: set[str], role: str) -> bool:
    try:
        Identity("t", frozenset(roles)).require(role)
    except DomainError:
        return False
    return True


@pytest.mark.parametrize(
    ("roles", "granted"),
    [
        ({"reader"}, {"reader"}),
        ({"writer"}, {"reader", "writer"}),
        ({"admin"}, {"reader", "writer", "admin", "approver"}),
        ({"approver"}, {"approver"}),  # least privilege: an approver is not a writer
        ({"reader", "approver"}, {"reader", "approver"}),
    ],
)
def test_approver_is_a_role_of_its_own_and_admin_includes_it(
    roles: set[str], granted: set[str]
) -> None:
    for role in ("reader", "writer", "admin", "approver"):
        assert reservations(roles, role) is (role in granted), role


def table(path: Path, **row: object) -> TokenTable:
    base = {"sha256": hashlib.sha256(b"token").hexdigest(), "tenant": "t", "roles": ["approver"]}
    path.write_text(json.dumps({"tokens": [base | row]}))
    return TokenTable.load(path)


def test_a_principal_names_the_caller_and_defaults_to_a_digest_prefix(tmp_path: Path) -> None:
    named = table(tmp_path / "named.json", principal="lee").authenticate("Bearer token")
    assert (named.principal, named.roles) == ("lee", frozenset({"approver"}))
    derived = table(tmp_path / "derived.json").authenticate("Bearer token")
    assert derived.principal == hashlib.sha256(b"token").hexdigest()[:12]
    assert DEV_IDENTITY.principal == "dev"


@pytest.mark.parametrize("principal", ["", 7, "x" * 129, "line\nbreak"])
def test_a_bad_principal_is_refused_at_start(tmp_path: Path, principal: object) -> None:
    with pytest.raises(SettingsError, match=r"tokens\[0\]"):
        table(tmp_path / "bad.json", principal=principal)
