"""Every event of the budget scenarios, hard and advisory: closed OpenWOP v1 shapes, no pricing."""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from budget_service.domain.events import OPENWOP_PAYLOAD_SCHEMAS
from tests.support.budget import Budget, assert_openwop_payload, leaking_keys
from tests.support.scenarios import SCENARIOS, run_everything
from tests.support.servers import StartServer


@pytest.mark.parametrize("enforce", ["hard", "advisory"])
async def test_every_emitted_payload_is_a_closed_openwop_shape(
    start_server: StartServer, db: asyncpg.Connection, enforce: str
) -> None:
    runner = await start_server("budget", RATION_ENFORCE=enforce)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        await run_everything(Budget(channel))
    rows = await db.fetch("SELECT type, payload_json FROM budget.events ORDER BY run_id, seq")
    assert len(SCENARIOS) >= 4
    assert len(rows) > 20
    for row in rows:
        assert_openwop_payload(row["type"], row["payload_json"])
    assert {row["type"] for row in rows} >= set(OPENWOP_PAYLOAD_SCHEMAS) - (
        {"run.failed", "cap.breached"} if enforce == "advisory" else set()
    )


def test_the_checks_reject_extra_keys_and_pricing() -> None:
    good = '{"dimension":"cost","consumed":0.5,"limit":1.0,"remaining":0.5}'
    assert_openwop_payload("budget.consumed", good)
    with pytest.raises(Exception, match="Additional properties"):
        assert_openwop_payload("budget.consumed", good[:-1] + ',"note":"x"}')
    with pytest.raises(AssertionError, match="pricing"):
        assert_openwop_payload("run.failed", '{"error":{"code":"x","message":"y","rateCard":1}}')
    nested = '{"a":{"b":[{"inputPricePerMTok":3}]},"apiKey":"k","maxTokens":1}'
    assert leaking_keys(nested) == ["inputPricePerMTok", "apiKey"]
