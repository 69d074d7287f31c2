"""servicekit/timeshare.py: a tenant's share of time, a bucket that refills (issue 24)."""

from __future__ import annotations

import pytest

from servicekit.timeshare import TimeShare
from tests.support.clock import ManualClock


def test_a_tenant_within_its_share_never_waits() -> None:
    clock = ManualClock()
    share = TimeShare(0.25, burst=1.0, min_cost=0.001, clock=clock)
    for _ in range(100):  # 10 ms of work every 100 ms: 10 % of the time
        assert share.wait_seconds("a") == 0
        share.spend("a", 0.01)
        clock.now += 0.1


def test_a_tenant_past_its_share_waits_until_it_refilled_and_others_do_not() -> None:
    clock = ManualClock()
    share = TimeShare(0.25, burst=1.0, min_cost=0.001, clock=clock)
    share.spend("a", 1.5)  # the whole burst and half a second more
    wait = share.wait_seconds("a")
    assert wait == pytest.approx(2.0, abs=0.01)  # 0.5 s owed at 0.25 s a second
    assert share.wait_seconds("b") == 0
    clock.now += wait
    assert share.wait_seconds("a") == 0


def test_each_call_costs_at_least_the_minimum() -> None:
    clock = ManualClock()
    share = TimeShare(0.1, burst=0.05, min_cost=0.01, clock=clock)
    for _ in range(5):
        assert share.wait_seconds("a") == 0
        share.spend("a", 0.0)  # free statements still count as 10 ms each
    assert share.wait_seconds("a") > 0


def test_a_share_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TimeShare(0, burst=1, min_cost=0)
