"""The oracle's pool windows (tests/support/windows.py) are the engine's: the window a pool row
is keyed by (budget.window_start_v1) and when it ends (budget.window_end_v1), which production
reads take from the database since the Python twin left budget_service."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from budget_service.domain.policy import Window
from tests.support.windows import window_end, window_start

INSTANTS = [
    datetime(2026, 12, 1, 22, 39, 8, 123456, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2027, 1, 1, 0, 0, tzinfo=UTC),
    datetime(2028, 2, 29, 12, 0, tzinfo=UTC),  # a leap day, a Tuesday
    datetime(2026, 11, 30, 0, 0, tzinfo=UTC),  # a Monday: its own week's start
    datetime(1999, 1, 31, 23, 0, tzinfo=UTC),  # a month ending on the 31st
]


@pytest.mark.parametrize("window", list(Window))
async def test_the_oracle_windows_are_the_engine_windows(
    db: asyncpg.Connection, window: Window
) -> None:
    for instant in INSTANTS:
        start, end = await db.fetchrow(
            "SELECT budget.window_start_v1($1, $2),"
            " budget.window_end_v1($1, budget.window_start_v1($1, $2))",
            window.value,
            instant,
        )
        assert start == window_start(window, instant), instant
        assert end == window_end(window, start), instant
