"""The bench's own cluster: started from the system's binaries, measured alone, removed after."""

from __future__ import annotations

import asyncio

import pytest

from bench import database

pytestmark = pytest.mark.system


def test_the_bench_runs_its_own_cluster_and_removes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    if database._system_bin_dir() is None:
        pytest.skip("no system PostgreSQL binaries (the bench then uses embedded pgserver)")
    monkeypatch.delenv("BENCH_DATABASE_URL", raising=False)
    with database.postgres_server() as server:
        assert server.source.startswith("own cluster")
        assert ":5432/" not in server.url
        version = database.server_version(server.url)
        assert version.startswith("PostgreSQL")
        # Nobody else uses it: our connection is the only client backend.
        clients = asyncio.run(
            database.admin(
                server.url,
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
            )
        )
        assert clients == ["1"]
    assert not asyncio.run(database._answers(server.url))


def test_the_shared_server_is_chosen_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/x")
    with database.postgres_server() as server:
        assert "shared" in server.source
