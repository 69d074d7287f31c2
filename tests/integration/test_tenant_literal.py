"""The tenant enters each transaction as a SQL literal (one message with BEGIN): whatever the
tenant's characters, Postgres reads back exactly that tenant and nothing else runs."""

from __future__ import annotations

import asyncpg
import pytest

from servicekit.db import TENANT_SETTING, enter_tenant, quote_literal

AWKWARD = [
    "plain",
    "O'Brien",
    "back\\slash",
    "\\'; DROP TABLE budget.runs; --",
    "'' OR ''='",
    "trailing\\",
    "日本語 tenant",
    "E'x'",
]


@pytest.mark.parametrize("conforming", ["on", "off"])
@pytest.mark.parametrize("tenant", AWKWARD)
async def test_any_tenant_reads_back_exactly_as_itself(
    db: asyncpg.Connection, tenant: str, conforming: str
) -> None:
    await db.execute(f"SET standard_conforming_strings = {conforming}")
    assert await db.fetchval(f"SELECT {quote_literal(tenant)}") == tenant
    await db.execute(enter_tenant(tenant))
    try:
        assert await db.fetchval("SELECT current_setting($1)", TENANT_SETTING) == tenant
        assert await db.fetchval("SELECT count(*) FROM budget.runs") == 0  # still there
    finally:
        await db.execute("ROLLBACK")


def test_a_nul_cannot_become_a_literal() -> None:
    with pytest.raises(ValueError, match="NUL"):
        quote_literal("a\0b")
