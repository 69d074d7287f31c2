"""`ration migrate --distribute` on plain PostgreSQL: refused with the reason, nothing done."""

from __future__ import annotations

import asyncpg
import pytest

from servicekit import citus
from tests.support.citus import URL_VARIABLE, skip_reason


async def test_distributing_needs_a_citus_coordinator(db: asyncpg.Connection) -> None:
    assert not await citus.on_citus(db)
    assert not await citus.distributed(db, ["budget", "memory"])
    with pytest.raises(RuntimeError, match="needs a Citus coordinator"):
        await citus.distribute(db, ["budget", "memory"])


def test_the_citus_system_tests_skip_plain_postgres_with_the_reason(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    assert skip_reason() == f"{URL_VARIABLE} is not set: no Citus coordinator to test against"
    monkeypatch.setenv(URL_VARIABLE, database_url)
    assert skip_reason() == (
        f"{URL_VARIABLE} is plain PostgreSQL (no citus extension in its database)"
    )
