"""A token row's tenant is refused at start unless printable and bounded (it reaches Postgres)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servicekit.auth import TokenTable, digest
from servicekit.settings import SettingsError

MAX_TENANT_CHARS = 128  # servicekit.auth.MAX_TENANT_CHARS
GOOD = {"sha256": digest("good-token"), "tenant": "acme", "roles": ["writer"]}


def write(tmp_path: Path, tenant: str) -> Path:
    row = {"sha256": digest("t"), "tenant": tenant, "roles": ["admin"]}
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [GOOD, row]}))
    return path


@pytest.mark.parametrize(
    "tenant",
    ["t\x00x", "t\nx", "t\tx", "t\x1bx", "t\x7fx", "t\u2028x", "a" * (MAX_TENANT_CHARS + 1)],
)
def test_a_tenant_with_control_characters_or_too_long_is_refused_naming_the_row(
    tmp_path: Path, tenant: str
) -> None:
    path = write(tmp_path, tenant)
    with pytest.raises(SettingsError) as caught:
        TokenTable.load(path)
    message = str(caught.value)
    assert message.startswith(f"RATION_TOKEN_FILE={path} is invalid")
    assert "tokens[1].tenant must" in message
    assert tenant not in message


def test_a_printable_tenant_up_to_the_limit_is_accepted(tmp_path: Path) -> None:
    tenant = "t" * MAX_TENANT_CHARS
    table = TokenTable.load(write(tmp_path, tenant))
    assert table.authenticate("Bearer t").tenant == tenant
    assert TokenTable.load(write(tmp_path, "Acme Corp / é")).authenticate("Bearer t").tenant
