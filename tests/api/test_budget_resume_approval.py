"""ResumeRun approves: admin or approver, INTERRUPTED runs only, clamped, recorded by principal."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget
from tests.support.errors import rpc_error
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

CEILING = 1000  # RATION_MAX_BUDGET_TOKENS of the server under test
NOTE = "ticket OPS-42: raise for the nightly batch"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_file(path: Path) -> Path:
    return write_token_file(
        path,
        ("reader-a", "a", ["reader"]),
        ("writer-a", "a", ["writer"]),
        ("approver-a", "a", ["approver"], "lee"),
        ("admin-a", "a", ["admin"]),  # no principal
    )


As = Callable[[str], Budget]


@pytest.fixture
async def as_(start_server: StartServer, tmp_path: Path) -> AsyncIterator[As]:
    runner = await start_server(
        "budget",
        RATION_TOKEN_FILE=str(token_file(tmp_path / "tokens.json")),
        RATION_MAX_BUDGET_TOKENS=str(CEILING),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield lambda token: Budget(channel, (("authorization", f"Bearer {token}"),))


async def interrupted(budget: Budget, run_id: str) -> pb.Run:
    """A run an admin capped at 100 tokens, stopped (INTERRUPT) by a 150-token call."""
    await budget.open_run(run_id, max_tokens=100, on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT)
    await budget.consume(run_id, tokens=150)
    run = await budget.get_run(run_id)
    assert run.state == pb.RUN_STATE_INTERRUPTED
    return run


async def resume_rows(db: asyncpg.Connection) -> list[dict[str, object]]:
    rows = await db.fetch("SELECT detail FROM budget.ledger WHERE decision = 'resume'")
    return [json.loads(r["detail"]) for r in rows]


async def test_resume_run_needs_the_admin_or_approver_role(as_: As, db: asyncpg.Connection) -> None:
    writer = as_("writer-a")
    await interrupted(writer, "r")
    for token in ("writer-a", "reader-a"):  # a writer cannot raise its own run
        denied = await rpc_error(as_(token).resume("r", approver="me", tokens=10_000_000))
        assert (denied.code, denied.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED")
        assert denied.metadata == {"role": "approver"}
    run = await writer.get_run("r")
    assert (run.state, run.effective_budget.max_tokens) == (pb.RUN_STATE_INTERRUPTED, 100)
    assert await resume_rows(db) == []
    # The approver role approves and nothing else: it is not a writer.
    refused = await rpc_error(as_("approver-a").reserve("r", tokens=1))
    assert (refused.reason, refused.metadata) == ("ROLE_REQUIRED", {"role": "writer"})


async def test_resume_run_is_refused_on_an_active_run(as_: As, db: asyncpg.Connection) -> None:
    writer, admin = as_("writer-a"), as_("admin-a")
    await writer.open_run("active", max_tokens=100, on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT)
    refused = await rpc_error(admin.resume("active", tokens=500))
    assert (refused.code, refused.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RUN_NOT_INTERRUPTED",
    )
    assert refused.metadata == {"state": "active"}
    run = await writer.get_run("active")
    assert (run.effective_budget.max_tokens, run.policy_version) == (100, 1)
    assert [t for t, _ in await writer.trace("active")] == ["budget.reserved"]
    assert await resume_rows(db) == []


async def test_resume_run_clamps_to_the_host_ceiling_and_records_the_principal(
    as_: As, db: asyncpg.Connection
) -> None:
    writer = as_("writer-a")
    await interrupted(writer, "r")
    resumed = await as_("approver-a").resume("r", approver=NOTE, tokens=10_000_000)
    assert resumed.state == pb.RUN_STATE_ACTIVE
    assert resumed.effective_budget.max_tokens == CEILING
    tokens = next(d for d in resumed.dimensions if d.dimension == pb.DIMENSION_TOKENS)
    assert (tokens.limit, tokens.clamped_by) == (CEILING, "host")
    reserved = [p for t, p in await writer.trace("r") if t == "budget.reserved"]
    assert reserved == [
        {"effectiveBudget": {"maxTokens": 100}, "scope": "run"},
        {"effectiveBudget": {"maxTokens": CEILING}, "scope": "run"},
    ]
    assert await resume_rows(db) == [
        {
            "delta": {"tokens": CEILING - 100},  # what the limit actually rose by
            "requested": {"tokens": 10_000_000},
            "approver": "lee",  # the authenticated principal, not the request text
            "note": NOTE,
        }
    ]
    # The note is kept for the audit trail only: no reply or event repeats it.
    assert NOTE not in str(resumed)
    assert all(NOTE not in e.payload_json for e in await writer.events("r"))


async def test_an_admin_without_a_principal_is_recorded_by_its_digest_prefix(
    as_: As, db: asyncpg.Connection
) -> None:
    await interrupted(as_("writer-a"), "r")
    resumed = await as_("admin-a").resume("r", approver="ops@example.com", tokens=50)
    assert resumed.effective_budget.max_tokens == 150
    (row,) = await resume_rows(db)
    assert row["approver"] == digest("admin-a")[:12]
    assert row["note"] == "ops@example.com"
