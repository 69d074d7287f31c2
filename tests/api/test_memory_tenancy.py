"""CTI-1: another tenant's memory reads exactly like one that does not exist, and row-level
security keeps it that way even with the application's tenant filter removed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from memory_service.store import candidate_reads as store_candidates
from memory_service.store import reads as store_reads
from memory_service.store import writes as store
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as pb
from tests.support.errors import rpc_error
from tests.support.memory import Memory
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

SHARED_REF = "shared/notes"
SECRET_TEXT = "alpha's plan: the merger closes on Friday"
# `tenant_id = $1` in any alias form: the application's own tenant predicate.
TENANT_PREDICATE = re.compile(r"(?:\b\w+\.)?tenant_id = \$1\b")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json",
        ("alpha-token", "alpha", ["writer"]),
        ("beta-token", "beta", ["writer"]),
    )


async def reads(memory: Memory, stored: m.EntryVersion) -> list[Any]:
    """Every read a tenant can aim at a memory, as (kind, outcome) pairs comparable by value."""
    outcomes: list[Any] = []
    for request in (
        {"token_budget": 800},
        {"rank": m.RANK_RELEVANCE, "query": "when does the merger close?"},
        {"tag": "x", "limit": 3},
    ):
        outcomes.append(("list", (await memory.list_memory(**request)).SerializeToString()))
    for mode in (m.SEARCH_MODE_SEMANTIC, m.SEARCH_MODE_FILTER):
        reply = await memory.search(mode=mode, query="merger")
        outcomes.append(("search", reply.SerializeToString()))
    for call in (
        memory.capacity(),
        memory.cite(1, stored.entry_id, stored.entry_version_id),
        memory.version(stored.entry_version_id),
        memory.revisions(0, 1),
        memory.changes(1),
    ):
        error = await rpc_error(call)
        outcomes.append(("error", error.code, error.reason, error.message, error.metadata))
    return outcomes


async def alpha_writes(channel: grpc.aio.Channel) -> m.EntryVersion:
    alpha = Memory(channel, SHARED_REF, token="alpha-token")
    stored = (await alpha.append(SECRET_TEXT)).entries[0]
    assert (await alpha.list_memory()).entries[0].content == SECRET_TEXT
    return stored


async def test_another_tenants_memory_reads_exactly_like_a_missing_one(
    start_server: StartServer, token_file: Path
) -> None:
    runner = await start_server("memory", RATION_TOKEN_FILE=str(token_file))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        stored = await alpha_writes(channel)
        beta_on_alphas = await reads(Memory(channel, SHARED_REF, token="beta-token"), stored)
        beta_on_nothing = await reads(Memory(channel, "never/written", token="beta-token"), stored)
        assert beta_on_alphas == beta_on_nothing
        listed = pb.ListMemoryResponse.FromString(beta_on_alphas[0][1])
        assert (listed.revision, list(listed.entries), listed.candidate_count) == (0, [], 0)
        for outcome in beta_on_alphas:
            assert SECRET_TEXT.encode() not in repr(outcome).encode()


# The read path's one-statement function (migration 0005) with its tenant predicate removed.
HEAD_FUNCTION = """
CREATE OR REPLACE FUNCTION memory.heads_as_tenant(p_tenant text, p_memory_refs text[])
RETURNS TABLE (memory_ref text, memory_id uuid, head_revision bigint, now timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    RETURN QUERY
        SELECT m.memory_ref, m.memory_id, m.head_revision, now() FROM memory.memories m
        WHERE m.memory_ref = ANY(p_memory_refs) AND m.head_revision > 0;
END
$$
"""


async def strip_tenant_filters(monkeypatch: pytest.MonkeyPatch, db: asyncpg.Connection) -> int:
    """Removes `tenant_id = $1` from every query of the memory store and from its SQL function
    (a test build without the application's tenant filter); returns how many were changed."""
    changed = 0
    for module in (store, store_reads, store_candidates):
        for name, value in vars(module).items():
            if isinstance(value, str) and TENANT_PREDICATE.search(value):
                stripped = TENANT_PREDICATE.sub("$1::text IS NOT NULL", value)
                monkeypatch.setattr(module, name, stripped)
                changed += 1
    await db.execute(HEAD_FUNCTION)
    return changed + 1


async def test_row_level_security_hides_other_tenants_without_the_app_filter(
    start_server: StartServer,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    db: asyncpg.Connection,
) -> None:
    # The server connects as the application role (tests/conftest.py), as deployed.
    runner = await start_server("memory", RATION_TOKEN_FILE=str(token_file))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        stored = await alpha_writes(channel)
        beta = Memory(channel, SHARED_REF, token="beta-token")
        baseline = await reads(Memory(channel, "never/written", token="beta-token"), stored)
        assert await strip_tenant_filters(monkeypatch, db) >= 10
        # Row-level security alone: beta still sees nothing of alpha's.
        assert await reads(beta, stored) == baseline
        # The control: with row-level security off (the superuser `db` connection), the
        # stripped queries do leak, so the line above proved something.
        for table in ("memories", "revisions", "entry_versions", "manifest_items"):
            await db.execute(f"ALTER TABLE memory.{table} DISABLE ROW LEVEL SECURITY")
        leaked = await beta.list_memory()
        assert [e.content for e in leaked.entries] == [SECRET_TEXT]
        assert (await beta.capacity()).active_entry_count == 1
