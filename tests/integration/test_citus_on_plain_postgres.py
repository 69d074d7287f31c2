"""`ration migrate --distribute` on plain PostgreSQL: refused with the reason, nothing done."""

from __future__ import annotations

import asyncpg
import pytest

from servicekit import citus


async def test_distributing_needs_a_citus_coordinator(db: asyncpg.Connection) -> None:
    assert not await citus.on_citus(db)
    assert not await citus.distributed(db, ["budget", "memory"])
    with pytest.raises(RuntimeError, match="needs a Citus coordinator"):
        await citus.distribute(db, ["budget", "memory"])
