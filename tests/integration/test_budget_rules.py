"""The engine's judgment, function by function: each small SQL function of
budget_service/store/functions/ called with generated values gives what the oracle's rule
function (tests/support/oracle.py) gives for the same values.

The whole engine is compared with the oracle reply by reply in
test_budget_oracle_differential.py; here each rule is compared alone, over many more values
than a sequence of calls reaches (unbounded balances, balances already past their limit,
settling what is held exactly, every state and flag), so a difference names its rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget_service.domain.policy import (
    MAX_TOTAL,
    AnyDimension,
    Dimension,
    EffectiveBudget,
    Enforcement,
    OnExhaustion,
    Scope,
)
from budget_service.domain.run_state import (
    RUN_BALANCE,
    Balance,
    BalanceRef,
    Breach,
    Contention,
    ReserveMode,
    RunState,
    RunStatus,
)
from tests.support import oracle

DIMS = oracle.DIMENSIONS
ALL = oracle.ALL_DIMENSIONS
RULES = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_limit = st.one_of(st.none(), st.integers(0, 50))
_amount = st.integers(0, 60)
# An unbounded balance may hold almost the whole bigint range: the estimate must then not fit.
_held = st.one_of(st.integers(0, 60), st.just(MAX_TOTAL - 20))
_flags = st.frozensets(st.sampled_from(DIMS))


def bounded_held(limits: Sequence[int | None], held: Sequence[int]) -> tuple[int, ...]:
    return tuple(h if lim is None else min(h, 60) for lim, h in zip(limits, held, strict=True))


def mask(flags: frozenset[Dimension]) -> int:
    """budget.flag_mask_v1's bits: tokens 1, cost 2, toolCalls 4, retries 8."""
    return sum(1 << DIMS.index(d) for d in flags)


def flags_of(bits: int) -> frozenset[Dimension]:
    return frozenset(d for i, d in enumerate(DIMS) if bits >> i & 1)


def run_value(
    limits: Sequence[int | None],
    used: Sequence[int],
    held: Sequence[int],
    state: RunState = RunState.ACTIVE,
    threshold: int = 80,
    on_exhaustion: OnExhaustion = OnExhaustion.FAIL,
    status: RunStatus | None = None,
) -> tuple[Any, ...]:
    """A budget.engine_run_v2, field for field (migrations 0014, 0016)."""
    status = status or RunStatus()
    crossed, exhausted, breached = (
        mask(f) for f in (status.crossed, status.exhausted, status.breached)
    )
    return (
        "run", "proj", "wf", "agent", state.value, threshold, on_exhaustion.value, "{}", "[]",
        False, 1, 1, list(limits), list(used), list(held), crossed, exhausted, breached,
        None, None, None, None, None, None, [], None, 0, 0, 0, False, "", "",
    )  # fmt: skip


def pool_value(
    scope_id: str,
    limits: Sequence[int | None],
    used: Sequence[int],
    held: Sequence[int],
    other: Sequence[int],
) -> tuple[Any, ...]:
    """A budget.engine_pool_v2 (a current window, found), field for field."""
    window = datetime(2026, 1, 1, tzinfo=UTC)
    return (
        "project", scope_id, window, "none", True, True, list(limits), list(used), list(held),
        list(other), 80, None, 0, 0, 1, 0, False,
    )  # fmt: skip


@RULES
@given(
    limit=_limit,
    used=_amount,
    held=_amount,
    amount=st.integers(1, 60),
    dimension=st.sampled_from(ALL),
    up_to=st.booleans(),
)
async def test_reserve_fit_is_the_oracles_fit(
    db: asyncpg.Connection,
    limit: int | None,
    used: int,
    held: int,
    amount: int,
    dimension: AnyDimension,
    up_to: bool,
) -> None:
    mode = ReserveMode.UP_TO if up_to else ReserveMode.ALL_OR_NOTHING
    partial = up_to and dimension in oracle.PARTIAL_DIMENSIONS
    got = await db.fetchval(
        "SELECT budget.reserve_fit_v2($1, $2, $3, $4, $5)", limit, used, held, amount, partial
    )
    assert got == oracle._fit(Balance(limit, used, held), dimension, amount, mode)


@RULES
@given(consumed=st.integers(0, 10**12), limit=st.integers(1, 10**12), percent=st.integers(0, 100))
async def test_threshold_reached_is_the_oracles(
    db: asyncpg.Connection, consumed: int, limit: int, percent: int
) -> None:
    got = await db.fetchval(
        "SELECT budget.threshold_reached_v2($1, $2, $3)", consumed, limit, percent
    )
    assert got == oracle.threshold_reached(consumed, limit, percent)


_run4 = st.tuples(_limit, _limit, _limit, _limit)
_pool = st.tuples(
    st.tuples(_limit, _limit, _limit, _limit, _limit),
    st.tuples(*[_amount] * 5),
    st.tuples(*[_held] * 5),
    st.tuples(*[st.integers(0, 10)] * 5),
)


@RULES
@given(
    run_limits=_run4,
    run_used=st.tuples(*[_amount] * 4),
    run_held=st.tuples(*[_held] * 4),
    pools=st.lists(_pool, max_size=2),
    estimate=st.tuples(*[_amount] * 4, st.integers(0, 1)),
    up_to=st.booleans(),
    advisory=st.booleans(),
)
async def test_reserve_verdict_and_grant_are_the_oracles_decide_reserve(
    db: asyncpg.Connection,
    run_limits: tuple[int | None, ...],
    run_used: tuple[int, ...],
    run_held: tuple[int, ...],
    pools: list[Any],
    estimate: tuple[int, ...],
    up_to: bool,
    advisory: bool,
) -> None:
    # Only an unbounded balance can hold that much: a bounded one never holds past its limit.
    run_held = bounded_held(run_limits, run_held)
    pools = [(lim, used, bounded_held(lim, held), other) for lim, used, held, other in pools]
    refs = [BalanceRef(Scope.PROJECT, f"p{i}") for i in range(len(pools))]
    balances: dict[BalanceRef, dict[Any, Balance]] = {
        RUN_BALANCE: {d: Balance(run_limits[i], run_used[i], run_held[i]) for i, d in
                      enumerate(DIMS)},
        **{ref: {d: Balance(lim[i], used[i], held[i] - other[i]) for i, d in enumerate(ALL)}
           for ref, (lim, used, held, other) in zip(refs, pools, strict=True)},
    }  # fmt: skip
    mode = ReserveMode.UP_TO if up_to else ReserveMode.ALL_OR_NOTHING
    enforcement = Enforcement.ADVISORY if advisory else Enforcement.HARD
    asked = dict(zip(ALL, estimate, strict=True))
    run = run_value(run_limits, run_used, run_held)
    pool_values = [pool_value(ref.scope_id, *p) for ref, p in zip(refs, pools, strict=True)]
    row = await db.fetchrow(
        "SELECT (v).*, budget.reserve_grant_v2($1, $2, $3, $4, $5) AS granted"
        " FROM budget.reserve_verdict_v2($1, $2, $4, $5) v",
        list(estimate), up_to, advisory, run, pool_values,
    )  # fmt: skip
    invalid: str | None = None
    try:
        wanted = oracle.decide_reserve(balances, asked, mode, enforcement)
    except oracle.Invalid as error:
        invalid = error.path
    assert row["invalid"] == invalid
    if invalid is not None:
        return

    def ref_of(position: int) -> BalanceRef:
        return RUN_BALANCE if position == 0 else refs[position - 1]

    breach = contention = None
    if row["breach_dim"] is not None:
        breach = Breach(
            ALL[row["breach_dim"] - 1], row["breach_limit"], row["breach_used"],
            row["breach_observed"], ref_of(row["breach_pool"]),
        )  # fmt: skip
    if row["held_dim"] is not None:
        contention = Contention(
            ALL[row["held_dim"] - 1], row["held_limit"], row["held_used"], row["held_held"],
            row["held_requested"], ref_of(row["held_pool"]),
        )  # fmt: skip
    assert (breach, contention) == (wanted.breach, wanted.contention)
    if not wanted.refused:  # what the engine holds: every asked dimension
        granted = {d: g for d, g in zip(ALL, row["granted"], strict=True) if asked[d] > 0}
        assert granted == dict(wanted.granted)


@RULES
@given(
    limits=_run4,
    used=st.tuples(*[_amount] * 4),
    held=st.tuples(*[_amount] * 4),
    settled=st.one_of(st.none(), st.tuples(*[st.integers(0, 60)] * 4)),
    usage=st.tuples(*[_amount] * 4),
    threshold=st.integers(0, 100),
    on_exhaustion=st.sampled_from(OnExhaustion),
    state=st.sampled_from(RunState),
    flags=st.tuples(_flags, _flags, _flags),
    advisory=st.booleans(),
)
async def test_consume_run_is_the_oracles_apply_consume(
    db: asyncpg.Connection,
    limits: tuple[int | None, ...],
    used: tuple[int, ...],
    held: tuple[int, ...],
    settled: tuple[int, ...] | None,
    usage: tuple[int, ...],
    threshold: int,
    on_exhaustion: OnExhaustion,
    state: RunState,
    flags: tuple[frozenset[Dimension], ...],
    advisory: bool,
) -> None:
    # A hold never holds more than its run does: settle at most what is held.
    reservation = None if settled is None else tuple(map(min, settled, held))
    status = RunStatus(state, flags[0], flags[1], flags[2])
    budget = EffectiveBudget(limits[0], limits[1], limits[2], limits[3], threshold, on_exhaustion)
    enforcement = Enforcement.ADVISORY if advisory else Enforcement.HARD
    wanted = oracle.apply_consume(
        {d: Balance(limits[i], used[i], held[i]) for i, d in enumerate(DIMS)},
        None if reservation is None else oracle.amounts(reservation),
        oracle.amounts(usage), budget, status, enforcement,
    )  # fmt: skip
    run = run_value(limits, used, held, state, threshold, on_exhaustion, status)
    row = await db.fetchrow(
        "SELECT (c.run).*, c.events FROM budget.consume_run_v2($1, $2, $3, $4) c",
        run, [*usage, 0], [*(reservation or (0, 0, 0, 0)), 0], advisory,
    )  # fmt: skip
    assert [Balance(row["lim"][i], row["used"][i], row["held"][i]) for i in range(4)] == [
        wanted.balances[d] for d in DIMS
    ]
    got_status = (
        RunState(row["state"]), flags_of(row["crossed"]), flags_of(row["exhausted"]),
        flags_of(row["breached"]),
    )  # fmt: skip
    new = wanted.status
    assert got_status == (new.state, new.crossed, new.exhausted, new.breached)
    stop = new.stopped_by if new.stopped_by is not status.stopped_by else None
    got_stop = row["stop_dim"], row["stop_lim"], row["stop_used"], row["stop_obs"]
    wanted_stop = (None,) * 4 if stop is None else (
        stop.dimension.value, stop.limit, stop.consumed, stop.observed
    )  # fmt: skip
    assert got_stop == wanted_stop
    events = [(e["type"], json.loads(e["payload"])) for e in row["events"]]
    assert events == [(e.event_type, json.loads(e.payload_json())) for e in wanted.events]
