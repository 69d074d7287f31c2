"""The services' JSON log lines as emitted, captured at DEBUG for secret scans."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from servicekit.logs import JsonFormatter


class JsonLines(logging.Handler):
    """The service's JSON log lines, formatted as they are emitted (the request id is a
    context variable of the call being served)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(name="debug_logs")
def debug_logs_fixture() -> Iterator[JsonLines]:
    """Import it into a test module to use the `debug_logs` fixture there."""
    root = logging.getLogger()
    handler, level = JsonLines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)
