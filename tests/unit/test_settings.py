"""Settings are validated at start with messages that name the bad variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from budget_service.usecases.settings import BudgetSettings
from memory_service.usecases.settings import MemorySettings
from servicekit.settings import Env, SettingsError, non_loopback


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
        # A write whose reply could not fit the message limit would commit, then fail in transport.
        ({"RATION_MEMORY_MAX_REQUEST_TEXT_BYTES": str(4 * 1024 * 1024)},
         "RATION_MEMORY_MAX_REQUEST_TEXT_BYTES"),
        ({"RATION_MAX_MESSAGE_BYTES": str(1024 * 1024),
          "RATION_MEMORY_MAX_REQUEST_TEXT_BYTES": str(1024 * 1024)},
         "RATION_MEMORY_MAX_REQUEST_TEXT_BYTES"),
    ],
)  # fmt: skip
def test_bad_memory_capacity_budget_is_refused(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        MemorySettings.from_env(Env(env))


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1", "2130706433", "[::1]"])
def test_development_mode_binds_a_name_or_literal_that_resolves_to_loopback(host: str) -> None:
    # 127.1 and 2130706433 are spellings of 127.0.0.1 that getaddrinfo resolves like names.
    settings = BudgetSettings.from_env(Env({"RATION_BUDGET_LISTEN": f"{host}:50051"}))
    assert settings.server.host == host.strip("[]")


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("0.0.0.0", "0.0.0.0 resolves to 0.0.0.0"),
        ("[::]", ":: resolves to ::"),
        # A name (here the numeric one getaddrinfo reads as 0.0.0.0) is judged by what it
        # resolves to, not by its spelling.
        ("0", "0 resolves to 0.0.0.0"),
        ("[::ffff:0.0.0.0]", "::ffff:0.0.0.0 resolves to ::ffff:0.0.0.0"),
        # RFC 6761: .invalid never resolves; this one starts like a loopback literal.
        ("127.0.0.1.invalid", "127.0.0.1.invalid does not resolve"),
    ],
)
def test_development_mode_refuses_a_host_that_is_not_only_loopback(host: str, why: str) -> None:
    with pytest.raises(SettingsError) as caught:
        MemorySettings.from_env(Env({"RATION_MEMORY_LISTEN": f"{host}:50052"}))
    message = str(caught.value)
    assert message.startswith("RATION_MEMORY_LISTEN=")
    assert f"binds only loopback addresses ({why})" in message
    assert "\n" not in message


def test_a_name_with_any_address_beyond_loopback_is_refused() -> None:
    # What getaddrinfo would answer for a name that /etc/hosts or DNS maps to loopback and to a
    # network address: one address beyond this machine is enough to refuse.
    def both(host: str) -> list[str]:
        return ["127.0.0.1", "192.0.2.7"]

    assert non_loopback("devbox", both) == "devbox resolves to 192.0.2.7"
    assert non_loopback("devbox", lambda host: ["127.0.0.1", "::1"]) is None
    assert non_loopback("devbox", lambda host: []) == "devbox resolves to nothing"


def test_with_tokens_any_address_may_be_bound(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    env = Env({"RATION_MEMORY_LISTEN": "0.0.0.0:50052", "RATION_TOKEN_FILE": str(tokens)})
    assert MemorySettings.from_env(env).server.host == "0.0.0.0"


def test_a_tenants_reports_get_five_percent_of_a_core_by_default() -> None:
    """Issue 24: at 25 % one tenant's report loop slowed another tenant's Reserve+Consume
    (p50 1.3-1.6x on the bench); reports are not on anybody's critical path."""
    assert BudgetSettings.from_env(Env({})).report_share == 0.05
    share = Env({"RATION_BUDGET_REPORT_SHARE_PERCENT": "25"})
    assert BudgetSettings.from_env(share).report_share == 0.25
