"""The reference model's batch rules (engine.md): twins and reused ids within a batch, expiry
first (kept whatever the first item's fate), order, missing runs and invalid totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from budget_service.domain.policy import (
    MAX_TOTAL,
    BudgetPolicy,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
)
from budget_service.domain.records import PoolKey
from budget_service.domain.run_state import BalanceRef, ReservationState
from budget_service.store import stored_replies as replies
from tests.support.oracle import BudgetOracle, Item

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POOL = BalanceRef(Scope.PROJECT, "p")


def _oracle(pool_tokens: int | None = None) -> BudgetOracle:
    oracle = BudgetOracle()
    if pool_tokens is not None:
        pooled = ScopeBudget(
            Scope.PROJECT, "p", ScopeBudgetKind.POOLED, BudgetPolicy(max_tokens=pool_tokens)
        )
        oracle.put_scope_budget(pooled)
    for run_id in ("a", "b"):
        policy = BudgetPolicy(max_tokens=10)
        oracle.open_run(f"open-{run_id}", b"o", run_id, "p", "", "", policy, NOW)
    return oracle


def reserve(request_id: str, run_id: str, tokens: int, fp: bytes = b"f", rid: str = "") -> Item:
    reservation_id = rid or f"res_{request_id}"
    return Item("reserve", run_id, (tokens, 0, 0, 0), request_id, fp, reservation_id, "m")


def test_a_twin_in_the_batch_replays_the_done_reply_and_a_reused_id_is_refused() -> None:
    oracle = _oracle()
    first, twin, other = (
        reserve("r1", "a", 3),
        reserve("r1", "a", 3, rid="res_x"),
        reserve("r1", "a", 4, fp=b"g"),
    )
    answers = oracle.decide_batch([first, twin, other], NOW)
    assert [a.outcome for a in answers] == ["done", "replay", "reused"]
    assert answers[1].response == answers[0].response
    assert answers[2].refusal == {"reason": "REQUEST_ID_REUSED", "requestId": "r1"}
    assert list(oracle.holds) == [("a", "res_r1")]
    assert oracle.runs["a"].held[next(iter(oracle.runs["a"].held))] == 3


def test_a_logged_request_replays_and_writes_nothing() -> None:
    oracle = _oracle()
    done = oracle.decide_batch([reserve("r1", "a", 3)], NOW)[0]
    rows = len(oracle.ledger)
    again = oracle.decide_batch([reserve("r1", "a", 3), reserve("r1", "a", 3, fp=b"g")], NOW)
    assert [a.outcome for a in again] == ["replay", "reused"]
    assert again[0].response == done.response
    assert len(oracle.ledger) == rows


def test_items_are_decided_in_order_and_a_refused_twin_is_decided_again() -> None:
    oracle = _oracle()
    answers = oracle.decide_batch(
        [
            reserve("r1", "a", 8),
            reserve("r2", "a", 5),  # held by r1: BUDGET_HELD
            Item("release", "a", request_id="r3", fingerprint=b"f", reservation_id="res_r1"),
            reserve("r2", "a", 5, rid="res_r2b"),  # its twin, decided again: fits now
        ],
        NOW,
    )
    assert [a.outcome for a in answers] == ["done", "refused", "done", "done"]
    assert answers[1].refusal is not None
    assert answers[1].refusal["reason"] == "BUDGET_HELD"
    assert answers[3].response is not None
    assert replies.reserve_of(answers[3].response).reservation.reservation_id == "res_r2b"
    decisions = [(row.decision, row.request_id) for row in oracle.ledger_of("a")]
    assert decisions[1:] == [("grant", "r1"), ("refusal", "r2"), ("release", "r3"), ("grant", "r2")]


def test_overdue_holds_expire_first_under_the_first_item_and_stay_when_it_is_refused() -> None:
    oracle = _oracle()
    oracle.decide_batch([reserve("r1", "a", 4), reserve("r2", "a", 4)], NOW)
    for rid in ("res_r1", "res_r2"):
        oracle.set_expiry("a", rid, NOW)
    later = NOW + timedelta(seconds=5)
    answers = oracle.decide_batch(
        [
            Item("consume", "a", (1, 0, 0, 0), "c1", b"f", "res_unknown", "m"),
            Item("release", "a", request_id="c2", fingerprint=b"f", reservation_id="res_r1"),
        ],
        later,
    )
    assert [a.refusal for a in answers] == [
        {"reason": "RESERVATION_NOT_FOUND"},
        {"reason": "RESERVATION_SETTLED", "state": "expired"},
    ]
    expiries = [(r.decision, r.request_id, r.reservation_id) for r in oracle.ledger_of("a")[3:]]
    assert expiries == [("expire", "c1", "res_r1"), ("expire", "c1", "res_r2")]
    assert all(h.state is ReservationState.EXPIRED for h in oracle.holds.values())
    assert oracle.runs["a"].held == dict.fromkeys(oracle.runs["a"].held, 0)
    assert not {"c1", "c2"} & oracle.request_log.keys()


def test_other_runs_overdue_holds_do_not_count_on_a_pool_and_stay_open() -> None:
    oracle = _oracle(pool_tokens=12)
    oracle.decide_batch([reserve("r1", "a", 9)], NOW)
    oracle.set_expiry("a", "res_r1", NOW)
    later = NOW + timedelta(seconds=5)
    refused_before = oracle.decide_batch([reserve("r2", "b", 9)], NOW - timedelta(seconds=1))
    assert refused_before[0].refusal is not None  # not yet overdue: the pool is held
    answer = oracle.decide_batch([reserve("r3", "b", 9)], later)[0]
    assert answer.outcome == "done"
    assert oracle.holds[("a", "res_r1")].state is ReservationState.OPEN  # a's run not locked
    key = PoolKey(POOL, datetime(1970, 1, 1, tzinfo=UTC))
    assert oracle.pool_rows[key].held[next(iter(oracle.pool_rows[key].held))] == 18


def test_a_missing_run_is_not_found_and_an_invalid_total_writes_nothing() -> None:
    oracle = BudgetOracle()
    oracle.open_run("open", b"o", "a", "p", "", "", BudgetPolicy(), NOW)
    oracle.decide_batch([reserve("r1", "a", MAX_TOTAL - 1)], NOW)
    rows = len(oracle.ledger)
    answers = oracle.decide_batch([reserve("r2", "nobody", 1), reserve("r3", "a", 2)], NOW)
    assert [a.outcome for a in answers] == ["not_found", "invalid"]
    assert answers[1].refusal == {"reason": "VALIDATION_FAILED", "field": "estimate.tokens"}
    assert len(oracle.ledger) == rows
    assert len(oracle.holds) == 1
