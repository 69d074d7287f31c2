"""The token file is read strictly at start, and bearer credentials are parsed per RFC 7235."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from budget_service.usecases.settings import BudgetSettings
from servicekit.auth import TokenTable, digest
from servicekit.errors import DomainError
from servicekit.settings import Env, SettingsError


class TokenRow(TypedDict):
    """One row of the token file."""

    sha256: str
    tenant: str
    roles: list[str]


GOOD: TokenRow = {"sha256": digest("good-token"), "tenant": "acme", "roles": ["writer"]}


def write(tmp_path: Path, rows: object) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": rows}))
    return path


@pytest.mark.parametrize(
    ("row", "fault"),
    [
        ({"sha256": digest("t"), "tenant": "acme"}, "tokens[1].roles is required"),
        ({"sha256": digest("t"), "tenant": "acme", "roles": []}, "tokens[1].roles is required"),
        ({"sha256": digest("t"), "tenant": "acme", "roles": "admin"}, "tokens[1].roles is req"),
        ({"sha256": digest("t"), "tenant": "acme", "roles": ["root"]}, "unknown roles ['root']"),
        ({"sha256": digest("t"), "tenant": "acme", "roles": [1]}, "tokens[1].roles has unknown"),
        ({"sha256": "z" * 64, "tenant": "acme", "roles": ["reader"]}, "tokens[1].sha256 must"),
        ({"sha256": "ab" * 31, "tenant": "acme", "roles": ["reader"]}, "tokens[1].sha256 must"),
        ({"sha256": "ab" * 33, "tenant": "acme", "roles": ["reader"]}, "tokens[1].sha256 must"),
        ({"sha256": 7, "tenant": "acme", "roles": ["reader"]}, "tokens[1].sha256 must"),
        ({"tenant": "acme", "roles": ["reader"]}, "tokens[1].sha256 must"),
        ({"sha256": digest("t"), "tenant": 42, "roles": ["reader"]}, "tokens[1].tenant must"),
        ({"sha256": digest("t"), "tenant": "  ", "roles": ["reader"]}, "tokens[1].tenant must"),
        ({"sha256": digest("t"), "tenant": "", "roles": ["reader"]}, "tokens[1].tenant must"),
        ({"sha256": digest("t"), "roles": ["reader"]}, "tokens[1].tenant must"),
        ({"sha256": digest("t"), "tenant": ["acme"], "roles": ["reader"]}, "tokens[1].tenant"),
        ("a token", "tokens[1] is not an object"),
        # The same token twice (whatever the case of its hex), even with other roles.
        ({"sha256": GOOD["sha256"].upper(), "tenant": "other", "roles": ["admin"]},
         "tokens[1].sha256 repeats tokens[0].sha256"),
    ],
)  # fmt: skip
def test_a_bad_token_row_is_refused_naming_the_row(tmp_path: Path, row: object, fault: str) -> None:
    path = write(tmp_path, [GOOD, row])
    with pytest.raises(SettingsError) as caught:
        TokenTable.load(path)
    message = str(caught.value)
    assert message.startswith(f"RATION_TOKEN_FILE={path} is invalid")
    assert fault in message
    assert "\n" not in message


@pytest.mark.parametrize("document", ['{"tokens": {}}', "[]", '{"token": []}', "{nope"])
def test_a_token_file_that_is_not_a_list_of_rows_is_refused(tmp_path: Path, document: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(document)
    with pytest.raises(SettingsError, match="RATION_TOKEN_FILE"):
        TokenTable.load(path)


def test_the_settings_refuse_a_bad_token_file_before_anything_starts(tmp_path: Path) -> None:
    path = write(tmp_path, [{"sha256": digest("t"), "tenant": "acme"}])
    with pytest.raises(SettingsError, match=r"tokens\[0\]\.roles is required"):
        BudgetSettings.from_env(Env({"RATION_TOKEN_FILE": str(path)}))


@pytest.mark.parametrize(
    "authorization",
    ["Bearer good-token", "bearer good-token", "BEARER good-token", "bEaReR  good-token "],
)
def test_the_bearer_scheme_is_case_insensitive(tmp_path: Path, authorization: str) -> None:
    table = TokenTable.load(write(tmp_path, [GOOD]))
    identity = table.authenticate(authorization)
    assert (identity.tenant, identity.roles) == ("acme", frozenset({"writer"}))


@pytest.mark.parametrize(
    "authorization",
    [None, "", "good-token", "Bearer", "Bearer ", "Basic good-token", "Bearergood-token"],
)
def test_anything_but_a_bearer_credential_is_unauthenticated(
    tmp_path: Path, authorization: str | None
) -> None:
    table = TokenTable.load(write(tmp_path, [GOOD]))
    with pytest.raises(DomainError) as caught:
        table.authenticate(authorization)
    assert caught.value.reason == "UNAUTHENTICATED"
