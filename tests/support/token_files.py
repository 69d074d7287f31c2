"""RATION_TOKEN_FILE for tests: the one place a token file is written, from plain tokens."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from servicekit.auth import digest

# (token, tenant, roles) or (token, tenant, roles, principal)
TokenRow = tuple[str, str, Sequence[str]] | tuple[str, str, Sequence[str], str]


def write_token_file(path: Path, *rows: TokenRow) -> Path:
    """Writes the token file at `path` (the tokens stored as their sha256) and returns `path`."""
    entries: list[dict[str, object]] = []
    for row in rows:
        entry: dict[str, object] = {
            "sha256": digest(row[0]),
            "tenant": row[1],
            "roles": list(row[2]),
        }
        if len(row) == 4:
            entry["principal"] = row[3]
        entries.append(entry)
    path.write_text(json.dumps({"tokens": entries}))
    return path
