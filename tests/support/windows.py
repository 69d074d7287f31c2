"""Pool windows as the oracle computes them: the Python twin of the engine's
budget.window_start_v1 and budget.window_end_v1 (store/functions/), which key every pool row
in production (the oracle differential test compares the rows they key)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from budget_service.domain.policy import WINDOW_EPOCH, Window


def window_end(window: Window, start: datetime) -> datetime | None:
    """When the window starting at `start` ends (None: a window-less pool never renews)."""
    if window is Window.NONE:
        return None
    if window is Window.MINUTE:
        return start + timedelta(minutes=1)
    if window is Window.HOUR:
        return start + timedelta(hours=1)
    if window is Window.DAY:
        return start + timedelta(days=1)
    if window is Window.WEEK:
        return start + timedelta(days=7)
    year, month = divmod(start.month, 12)
    return start.replace(year=start.year + year, month=month + 1)


def window_start(window: Window, now: datetime) -> datetime:
    """The UTC start of the calendar window containing `now`; pools are keyed by it, so a new
    window is simply a new balance row and nothing is ever reset."""
    if now.tzinfo is None:
        raise ValueError("window_start needs an aware datetime")
    utc = now.astimezone(UTC)
    if window is Window.MINUTE:
        return utc.replace(second=0, microsecond=0)
    if window is Window.HOUR:
        return utc.replace(minute=0, second=0, microsecond=0)
    midnight = utc.replace(hour=0, minute=0, second=0, microsecond=0)
    if window is Window.NONE:
        return WINDOW_EPOCH
    if window is Window.DAY:
        return midnight
    if window is Window.WEEK:
        return midnight - timedelta(days=midnight.weekday())  # ISO weeks start on Monday
    return midnight.replace(day=1)
