"""ResumeRun's `approver` note goes through SR-1's built-in detectors before it is kept (N4)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import asyncpg
import grpc

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget
from tests.support.servers import StartServer

KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"
NOTE = f"ticket OPS-42, key {KEY}"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def stored_texts(db: asyncpg.Connection) -> str:
    """Every row of every budget table as text, bytea columns also decoded as UTF-8."""
    tables = await db.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = 'budget' AND table_type = 'BASE TABLE'"
    )
    texts = []
    for table in tables:
        name = table["table_name"]
        for row in await db.fetch(f'SELECT * FROM budget."{name}"'):
            for value in row.values():
                if isinstance(value, bytes | memoryview):
                    texts.append(bytes(value).decode("utf-8", "replace"))
                elif value is not None:
                    texts.append(str(value))
    return "\n".join(texts)


async def test_a_secret_in_the_resume_note_never_reaches_the_ledger_events_or_replies(
    start_server: StartServer, tmp_path: Path, db: asyncpg.Connection
) -> None:
    tokens = tmp_path / "tokens.json"
    rows = [{"sha256": digest("admin-a"), "tenant": "a", "roles": ["admin"], "principal": "lee"}]
    tokens.write_text(json.dumps({"tokens": rows}))
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel, (("authorization", "Bearer admin-a"),))
        await budget.open_run("r", max_tokens=100, on_exhaustion=pb.ON_EXHAUSTION_INTERRUPT)
        await budget.consume("r", tokens=150)
        run = await budget.resume("r", approver=NOTE, tokens=1000)
        events = await budget.events("r")

    assert run.state == pb.RUN_STATE_ACTIVE
    assert KEY not in run.SerializeToString().decode("utf-8", "replace")
    assert all(KEY not in e.SerializeToString().decode("utf-8", "replace") for e in events)
    (detail,) = [
        json.loads(r["detail"])
        for r in await db.fetch("SELECT detail FROM budget.ledger WHERE decision = 'resume'")
    ]
    assert detail["approver"] == "lee"
    assert detail["note"] == "ticket OPS-42, key [REDACTED:openai_api_key]"
    stored = await stored_texts(db)
    assert "ticket OPS-42" in stored  # the scan sees the note
    assert KEY not in stored
    assert "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab" not in stored
