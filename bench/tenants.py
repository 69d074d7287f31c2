"""Two tenants with bearer tokens for the noisy-neighbour figures: A is noisy, B is measured."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

NOISY, MEASURED = "alpha", "beta"  # tenant A and tenant B
TENANTS = (NOISY, MEASURED)


def token(tenant: str) -> str:
    """The bearer token of `tenant`'s writer: `<tenant>-bench-writer`."""
    return f"{tenant}-bench-writer"


def metadata(tenant: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that authenticates as `tenant`'s writer."""
    return (("authorization", f"Bearer {token(tenant)}"),)


def token_file(path: Path) -> Path:
    """The server's RATION_TOKEN_FILE: a writer token per tenant, stored as its SHA-256."""
    rows = [
        {"sha256": hashlib.sha256(token(t).encode()).hexdigest(), "tenant": t, "roles": ["writer"]}
        for t in TENANTS
    ]
    path.write_text(json.dumps({"tokens": rows}))
    return path
