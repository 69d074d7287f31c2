"""Issue 27: `ration notify` carries an end-user pool's own alerts (threshold, exhaustion),
naming the scope END_USER, never the end-user's id."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import grpc

from budget_service.usecases.notify_settings import NotifySettings
from ration.budget.v1 import budget_pb2 as pb
from servicekit.settings import Env
from tests.api.test_budget_notify import notifying
from tests.support.budget import Budget, new_id
from tests.support.servers import StartServer
from tests.support.webhooks import Receiver

END_USER = "EndUserCanary5511"


async def test_an_end_user_pools_alerts_name_the_scope_and_never_the_end_user(
    start_server: StartServer, tmp_path: Path, app_database_url: str
) -> None:
    tokens = tmp_path / "t.json"
    digest = hashlib.sha256(b"alpha-admin").hexdigest()
    tokens.write_text(
        json.dumps({"tokens": [{"sha256": digest, "tenant": "alpha", "roles": ["admin"]}]})
    )
    runner = await start_server("budget", RATION_TOKEN_FILE=str(tokens))
    with Receiver() as receiver:
        hooks = tmp_path / f"webhooks-{uuid.uuid4().hex[:8]}.json"
        hook = {"id": "ops", "tenant": "alpha", "url": receiver.url(), "secret": "s"}
        hook |= {"format": "slack"}
        hooks.write_text(json.dumps({"webhooks": [hook]}))
        settings = NotifySettings.from_env(
            Env(
                {
                    "RATION_DATABASE_URL": app_database_url,
                    "RATION_NOTIFY_WEBHOOKS_FILE": str(hooks),
                    "RATION_NOTIFY_POLL_MS": "50",
                    "RATION_NOTIFY_START": "earliest",
                    "RATION_DB_POOL_MIN": "1",
                }
            )
        )
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel,
            notifying(settings),
        ):
            budget = Budget(channel, (("authorization", "Bearer alpha-admin"),))
            await budget.put_scope(
                pb.SCOPE_END_USER, END_USER, kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=100
            )
            await budget.stub.OpenRun(
                pb.OpenRunRequest(
                    request_id=new_id(), run_id="r", project_id="travel", end_user_id=END_USER
                ),
                metadata=budget.metadata,
            )
            hold = await budget.reserve("r", tokens=100)
            await budget.consume("r", hold.reservation.reservation_id, tokens=100)
            posted = await receiver.wait_accepted(2)
    texts = [r.json()["text"] for r in posted]
    assert texts == [
        "[ration] end_user pool (tenant alpha): tokens passed 80% of its limit: 100 of 100",
        "[ration] end_user pool (tenant alpha): tokens budget exhausted: 100 of 100",
    ]
    assert all(END_USER.encode() not in r.body for r in receiver.received)
