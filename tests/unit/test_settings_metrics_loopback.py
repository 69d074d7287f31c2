"""Development mode binds /metrics to loopback only, like the gRPC address (N5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget_service.usecases.settings import BudgetSettings
from memory_service.usecases.settings import MemorySettings
from servicekit.auth import digest
from servicekit.settings import Env, SettingsError


@pytest.mark.parametrize("value", ["0.0.0.0:47314", "[::]:9464", "192.0.2.7:9464"])
def test_a_metrics_bind_beyond_loopback_without_tokens_is_refused_naming_the_variable(
    value: str,
) -> None:
    with pytest.raises(SettingsError) as caught:
        BudgetSettings.from_env(Env({"RATION_BUDGET_METRICS_LISTEN": value}))
    message = str(caught.value)
    assert message.startswith(f"RATION_BUDGET_METRICS_LISTEN={value!r} is refused")
    assert "development mode and binds only loopback" in message
    with pytest.raises(SettingsError, match="RATION_MEMORY_METRICS_LISTEN"):
        MemorySettings.from_env(Env({"RATION_MEMORY_METRICS_LISTEN": value}))


@pytest.mark.parametrize("value", ["127.0.0.1:0", "localhost:9464", "[::1]:9464", "off"])
def test_a_loopback_or_disabled_metrics_bind_is_accepted_in_development_mode(value: str) -> None:
    assert BudgetSettings.from_env(Env({"RATION_BUDGET_METRICS_LISTEN": value})).server.dev_mode


def test_with_tokens_the_metrics_may_bind_every_interface(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    row = {"sha256": digest("t"), "tenant": "acme", "roles": ["reader"]}
    tokens.write_text(json.dumps({"tokens": [row]}))
    env = {"RATION_BUDGET_METRICS_LISTEN": "0.0.0.0:9464", "RATION_TOKEN_FILE": str(tokens)}
    assert BudgetSettings.from_env(Env(env)).server.metrics_host == "0.0.0.0"
