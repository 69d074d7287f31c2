"""Log format: compact text for a person at a terminal, JSON for pipes or when asked for."""

from __future__ import annotations

import io
import json
import logging
import os
import pty

import pytest

from servicekit.logs import JsonFormatter, TextFormatter, log_format
from servicekit.settings import Env, SettingsError


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_text_and_a_pipe_gets_json() -> None:
    assert log_format(Env({}), Terminal()) == "text"
    assert log_format(Env({}), io.StringIO()) == "json"


def test_a_real_pty_counts_as_a_terminal() -> None:
    controller, terminal = pty.openpty()
    try:
        with os.fdopen(terminal, "w", closefd=False) as stream:
            assert log_format(Env({}), stream) == "text"
    finally:
        os.close(controller)
        os.close(terminal)


@pytest.mark.parametrize("chosen", ["json", "text", "JSON"])
def test_ration_log_format_overrides_the_guess(chosen: str) -> None:
    env = Env({"RATION_LOG_FORMAT": chosen})
    assert log_format(env, Terminal()) == chosen.lower()
    assert log_format(env, io.StringIO()) == chosen.lower()


def test_an_unknown_log_format_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="RATION_LOG_FORMAT"):
        log_format(Env({"RATION_LOG_FORMAT": "xml"}), io.StringIO())


def record(msg: str, **extra: object) -> logging.LogRecord:
    entry = logging.LogRecord("servicekit.migrations", logging.INFO, "x.py", 1, msg, None, None)
    for key, value in extra.items():
        setattr(entry, key, value)
    return entry


def test_text_lines_are_one_line_with_the_same_fields_as_json() -> None:
    entry = record("migration applied", migration="budget/0001_schema", note="two words")
    line = TextFormatter().format(entry)
    assert "\n" not in line
    assert not line.startswith("{")
    assert "info" in line
    assert "migration applied" in line
    assert "migration=budget/0001_schema" in line
    assert 'note="two words"' in line
    parsed = json.loads(JsonFormatter().format(entry))
    assert parsed["migration"] == "budget/0001_schema"
    assert parsed["msg"] == "migration applied"


def test_error_text_names_class_sqlstate_and_message_bounded() -> None:
    import asyncpg

    from servicekit.logs import ERROR_TEXT_CHARS, error_text

    error = asyncpg.PostgresError("multi-task query about to be executed")
    error.sqlstate = "XX000"
    assert error_text(error) == ("PostgresError [XX000]: multi-task query about to be executed")
    assert error_text(TimeoutError()) == "TimeoutError"
    assert len(error_text(ValueError("x" * 5000))) == ERROR_TEXT_CHARS
