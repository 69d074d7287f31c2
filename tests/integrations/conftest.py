"""Fixtures for the integrations: a real budget server, a client on it, the fake provider."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from ration_client import BudgetClient
from tests.support.fake_llm import FakeLLM
from tests.support.servers import StartServer

# LiteLLM fetches its price map from the internet at import unless told to use the copy it
# ships; here (no internet) each import paid three failed attempts.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
async def budget_address(start_server: StartServer) -> str:
    runner = await start_server("budget")
    return f"127.0.0.1:{runner.port}"


@pytest.fixture
async def budget(budget_address: str) -> AsyncIterator[BudgetClient]:
    async with BudgetClient(budget_address) as client:
        yield client


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        yield fake
