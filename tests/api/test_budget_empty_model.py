"""An empty model is accepted for a tool call or retry only, as budget_requests.proto says."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ration_client import Amounts, BudgetClient, InvalidRequest
from tests.support.servers import StartServer

PROTO = Path(__file__).resolve().parents[2] / "proto/ration/budget/v1/budget_requests.proto"


@pytest.fixture
async def budget(start_server: StartServer) -> AsyncIterator[BudgetClient]:
    runner = await start_server("budget")
    async with BudgetClient(f"127.0.0.1:{runner.port}") as client:
        yield client


def test_the_proto_says_when_an_empty_model_is_accepted() -> None:
    for message in ("ReserveRequest", "ConsumeRequest"):
        text = PROTO.read_text().split(f"message {message} {{", 1)[1].split("\n}", 1)[0]
        comment = text.split("string model", 1)[0].rsplit("string", 1)[-1]
        assert "Empty is accepted only when" in comment, message
        assert "no tokens and no cost" in comment, message


async def test_an_empty_model_is_accepted_without_tokens_or_cost_only(
    budget: BudgetClient,
) -> None:
    await budget.open_run("r", project_id="p")
    hold = await budget.reserve("r", model="", estimate=Amounts(tool_calls=1))
    await budget.consume("r", usage=Amounts(retries=1), reservation_id="")
    await budget.release("r", hold.reservation.reservation_id)
    with pytest.raises(InvalidRequest) as refused:
        await budget.reserve("r", model="", estimate=Amounts(tokens=1))
    assert [field for field, _ in refused.value.violations] == ["model"]
    with pytest.raises(InvalidRequest) as refused:
        await budget.consume("r", model="", usage=Amounts(cost_nanos=1))
    assert [field for field, _ in refused.value.violations] == ["model"]
