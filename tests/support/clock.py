"""A monotonic clock the test moves by hand (no sleeping), for code that takes a `clock`."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
