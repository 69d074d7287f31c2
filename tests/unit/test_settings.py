"""Settings are validated at start with messages that name the bad variable."""

from __future__ import annotations

import pytest

from budget_service.settings import BudgetSettings
from memory_service.settings import MemorySettings
from servicekit.settings import Env, SettingsError


def test_defaults_listen_on_loopback_in_development_mode() -> None:
    settings = BudgetSettings.from_env(Env({}))
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 50051)
    assert settings.server.dev_mode
    assert settings.enforce == "hard"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RATION_BUDGET_LISTEN", "0.0.0.0:50051"),
        ("RATION_BUDGET_LISTEN", "nonsense"),
        ("RATION_ENFORCE", "sometimes"),
        ("RATION_MAX_BUDGET_COST_USD", "-1"),
        ("RATION_MAX_BUDGET_COST_USD", "0.0000000001"),
        ("RATION_DB_POOL_MAX", "0"),
        ("RATION_HOLD_TTL_SECONDS", "abc"),
        ("RATION_TOKEN_FILE", "/no/such/file"),
    ],
)
def test_bad_budget_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        BudgetSettings.from_env(Env({variable: value}))


def test_wildcard_bind_without_tokens_is_refused_with_a_clear_message() -> None:
    with pytest.raises(SettingsError, match="development mode and binds only loopback"):
        MemorySettings.from_env(Env({"RATION_MEMORY_LISTEN": "0.0.0.0:50052"}))


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "20", "RATION_MEMORY_MAX_MANIFEST_ENTRIES": "10"},
         "RATION_MEMORY_MAX_ACTIVE_ENTRIES"),
        ({"RATION_MEMORY_MAX_MANIFEST_BYTES": "1023"}, "RATION_MEMORY_MAX_MANIFEST_BYTES"),
        ({"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "0"}, "RATION_MEMORY_MAX_ACTIVE_ENTRIES"),
        ({"RATION_MEMORY_TOKEN_COUNTER": "words"}, "RATION_MEMORY_TOKEN_COUNTER"),
    ],
)  # fmt: skip
def test_bad_memory_capacity_budget_is_refused(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        MemorySettings.from_env(Env(env))
