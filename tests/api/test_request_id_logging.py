"""The caller's x-request-id reaches the logs only when short and of a safe shape (N3)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ration.budget.v1 import budget_service_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc
from servicekit.auth import digest
from servicekit.logs import JsonFormatter
from tests.support.servers import StartServer

KEY = "sk-proj-HdrLeakABCDEFGHIJKLMNOPQRSTUVWX0123"
LONG = "NoAuthLeak-" + "b" * 7000


class JsonLines(logging.Handler):
    """The service's JSON log lines, formatted while the call's context variables are set."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def debug_logs() -> Iterator[JsonLines]:
    root = logging.getLogger()
    handler, level = JsonLines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


async def test_a_request_id_shaped_like_a_secret_or_too_long_is_never_logged(
    start_server: StartServer, tmp_path: Path, debug_logs: JsonLines
) -> None:
    tokens = tmp_path / "tokens.json"
    row = {"sha256": digest("writer-token"), "tenant": "ta", "roles": ["writer"]}
    tokens.write_text(json.dumps({"tokens": [row]}))
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    kept = str(uuid.uuid4())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        stub = budget_service_pb2_grpc.BudgetServiceStub(channel)  # type: ignore[no-untyped-call]
        for token, sent in (("writer-token", KEY), ("no-such-token", LONG), ("writer-token", kept)):
            metadata = (("authorization", f"Bearer {token}"), ("x-request-id", sent))
            with pytest.raises(grpc.aio.AioRpcError):  # no such run / unauthenticated
                await stub.GetRun(pb.GetRunRequest(run_id="run_nope"), metadata=metadata)
    # The access line is written once the handler has ended, which can come after the client
    # already has its error (a CI run missed the last call's line): wait for all three.
    for _ in range(500):
        if sum('"msg": "rpc"' in line for line in debug_logs.lines) >= 3:
            break
        await asyncio.sleep(0.01)

    rpc_lines = [json.loads(line) for line in debug_logs.lines if '"msg": "rpc"' in line]
    logs = "\n".join(debug_logs.lines)
    assert KEY not in logs
    assert "sk-proj" not in logs
    assert "NoAuthLeak" not in logs
    assert max(len(line) for line in debug_logs.lines) < 2000
    # The safe id is kept; the others are replaced and only a hash prefix of what was sent shown.
    by_id = {line["request_id"]: line for line in rpc_lines}
    assert kept in by_id
    assert "request_id_sent_sha256" not in by_id[kept]
    digests = {line.get("request_id_sent_sha256") for line in rpc_lines}
    for sent in (KEY, LONG):
        assert hashlib.sha256(sent.encode()).hexdigest()[:12] in digests
