"""Random interleavings against real Postgres: granted always fits, the ledger sums to balances."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from budget_service.adapters.metrics import BudgetMetrics
from budget_service.domain import commands as cmd
from budget_service.domain.policy import (
    BudgetPolicy,
    Dimension,
    OnExhaustion,
    Scope,
    ScopeBudget,
    ScopeBudgetKind,
    Window,
)
from budget_service.domain.run_state import ReservationState, ReserveMode
from budget_service.store.event_hub import EVENTS_CHANNEL, EventHub
from budget_service.usecases.reservations import Reservations
from budget_service.usecases.runs import BudgetService
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.sweeper import Sweeper
from budget_service.usecases.transactions import Transactions
from servicekit.db import Database
from servicekit.errors import DomainError
from servicekit.settings import Env
from tests.support.audits import assert_ledger_matches_balances

T, C, TC = Dimension.TOKENS, Dimension.COST, Dimension.TOOL_CALLS
DIMS = (T, C, TC)
TENANT = "prop"
EXPECTED_REFUSALS = frozenset(
    {
        "BUDGET_HELD",
        "BUDGET_EXHAUSTED",
        "RUN_INTERRUPTED",
        "RUN_FAILED",
        "RUN_NOT_INTERRUPTED",
        "RESERVATION_SETTLED",
    }
)


@dataclass
class Harness:
    db: Database
    conn: asyncpg.Connection
    service: BudgetService
    reservations: Reservations
    sweeper: Sweeper


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    env = Env({"RATION_DATABASE_URL": database_url, "RATION_BUDGET_METRICS_LISTEN": "off"})
    budget_settings = BudgetSettings.from_env(env)
    db = Database(database_url, budget_settings.database)
    await db.connect()
    tx = Transactions(db, budget_settings, BudgetMetrics(CollectorRegistry()))
    conn = await asyncpg.connect(database_url)
    try:
        yield Harness(
            db,
            conn,
            BudgetService(tx, EventHub(database_url, EVENTS_CHANNEL)),
            Reservations(tx),
            Sweeper(tx),
        )
    finally:
        await conn.close()
        await db.close()


def mutation(method: str) -> cmd.Mutation:
    return cmd.Mutation(method, uuid.uuid4().hex, uuid.uuid4().bytes)


@dataclass
class Model:
    """What the test knows: open holds, and usage recorded beyond holds (allowed overruns)."""

    runs: list[str]
    pool: str
    limits: dict[str, dict[Dimension, int | None]]
    reservations: list[tuple[str, str, dict[Dimension, int]]] = field(default_factory=list)
    excess: dict[str, dict[Dimension, int]] = field(default_factory=dict)


# One optional limit per dimension of DIMS.
Limits = tuple[int | None, int | None, int | None]
_limit = st.one_of(st.none(), st.integers(min_value=1, max_value=60))
_amounts = st.fixed_dictionaries({d: st.integers(min_value=0, max_value=25) for d in DIMS})
_run = st.integers(min_value=0, max_value=1)
_index = st.integers(min_value=0, max_value=4)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), _run, _amounts, st.sampled_from(list(ReserveMode))),
        st.tuples(st.just("consume"), _run, _index, _amounts),
        st.tuples(st.just("unreserved"), _run, _amounts),
        st.tuples(st.just("release"), _index),
        st.tuples(st.just("expire"), _index),
        st.tuples(
            st.just("sweep"),
        ),
        st.tuples(st.just("resume"), _run, st.integers(min_value=0, max_value=30)),
    ),
    min_size=1,
    max_size=14,
)


async def _balances(
    conn: asyncpg.Connection, model: Model
) -> dict[str, dict[Dimension, tuple[int, int]]]:
    """(consumed, held that still counts) per balance, by the database clock."""
    found: dict[str, dict[Dimension, tuple[int, int]]] = {}
    for run_id in model.runs:
        row = await conn.fetchrow(
            "SELECT * FROM budget.runs WHERE tenant_id = $1 AND run_id = $2", TENANT, run_id
        )
        overdue = await conn.fetchrow(
            "SELECT "
            + ", ".join(f"coalesce(sum(granted_{d.field_name}), 0) AS {d.field_name}" for d in DIMS)
            + " FROM budget.holds WHERE tenant_id = $1 AND run_id = $2 AND state = 'open'"
            " AND expires_at <= now()",
            TENANT,
            run_id,
        )
        found[run_id] = {
            d: (
                row[f"consumed_{d.field_name}"],
                row[f"held_{d.field_name}"] - overdue[d.field_name],
            )
            for d in DIMS
        }
    pool = await conn.fetchrow(
        "SELECT * FROM budget.pool_balances WHERE tenant_id = $1 AND scope_id = $2"
        " ORDER BY window_start DESC LIMIT 1",
        TENANT,
        model.pool,
    )
    overdue_pool = await conn.fetchrow(
        "SELECT "
        + ", ".join(f"coalesce(sum(granted_{d.field_name}), 0) AS {d.field_name}" for d in DIMS)
        + " FROM budget.holds WHERE tenant_id = $1 AND run_id = ANY($2::text[])"
        " AND state = 'open' AND expires_at <= now()",
        TENANT,
        model.runs,
    )
    found[model.pool] = {
        d: (
            pool[f"consumed_{d.field_name}"] if pool else 0,
            (pool[f"held_{d.field_name}"] if pool else 0) - overdue_pool[d.field_name],
        )
        for d in DIMS
    }
    return found


def _bar(balances: dict[str, dict[Dimension, tuple[int, int]]], model: Model) -> None:
    for name, dims in balances.items():
        for d, (consumed, held) in dims.items():
            assert held >= 0
            limit = model.limits[name][d]
            if limit is not None:
                assert consumed + held <= limit + model.excess[name][d], (name, d)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    run_limits=st.tuples(_limit, _limit, _limit),
    pool_limits=st.tuples(_limit, _limit, _limit),
    on_exhaustion=st.sampled_from(list(OnExhaustion)),
    ops=_ops,
)
async def test_granted_never_exceeds_any_limit_and_the_ledger_matches(
    harness: Harness,
    run_limits: Limits,
    pool_limits: Limits,
    on_exhaustion: OnExhaustion,
    ops: list[tuple[Any, ...]],
) -> None:
    tag = uuid.uuid4().hex[:10]
    pool_id, runs = f"pool-{tag}", [f"a-{tag}", f"b-{tag}"]
    pool_policy = BudgetPolicy(*pool_limits)
    budget = ScopeBudget(Scope.PROJECT, pool_id, ScopeBudgetKind.POOLED, pool_policy, Window.DAY)
    await harness.service.put_scope_budget(TENANT, mutation("Put"), budget, pickle.dumps)
    for run_id in runs:
        policy = BudgetPolicy(*run_limits, on_exhaustion=on_exhaustion)
        opening = cmd.OpenRun(run_id, pool_id, "", "", policy)
        await harness.service.open_run(TENANT, mutation("OpenRun"), opening, pickle.dumps)
    limits = {name: dict(zip(DIMS, run_limits, strict=True)) for name in runs}
    limits[pool_id] = dict(zip(DIMS, pool_limits, strict=True))
    model = Model(runs, pool_id, limits, excess={n: dict.fromkeys(DIMS, 0) for n in limits})
    r = harness.reservations
    for op in ops:
        kind = op[0]
        try:
            if kind == "reserve":
                run_id = runs[op[1]]
                if not any(op[2].values()):
                    continue
                reserving = cmd.Reserve(run_id, "m", op[2], 60, op[3])
                reserved = await r.reserve(TENANT, mutation("Reserve"), reserving)
                granted = dict(reserved.reservation.granted)
                model.reservations.append((run_id, reserved.reservation.reservation_id, granted))
                after = await _balances(harness.conn, model)
                for name in (run_id, pool_id):
                    for d in DIMS:
                        limit = model.limits[name][d]
                        if granted[d] and limit is not None:
                            consumed, held = after[name][d]
                            assert consumed + held <= limit, ("granted past the limit", name, d)
            elif kind == "consume" and model.reservations:
                run_id, reservation_id, granted = model.reservations.pop(
                    op[2] % len(model.reservations)
                )
                consuming = cmd.Consume(run_id, reservation_id, "m", op[3])
                settlement = await r.consume(TENANT, mutation("Consume"), consuming)
                settled = settlement.reservation_state is ReservationState.CONSUMED
                for d in DIMS:
                    beyond = op[3][d] - (granted[d] if settled else 0)
                    for name in (run_id, pool_id):
                        model.excess[name][d] += max(0, beyond)
            elif kind == "unreserved":
                run_id = runs[op[1]]
                unreserved_use = cmd.Consume(run_id, "", "m", op[2])
                await r.consume(TENANT, mutation("Consume"), unreserved_use)
                for d in DIMS:
                    for name in (run_id, pool_id):
                        model.excess[name][d] += op[2][d]
            elif kind == "release" and model.reservations:
                run_id, reservation_id, _ = model.reservations.pop(op[1] % len(model.reservations))
                releasing = cmd.Release(run_id, reservation_id)
                await r.release(TENANT, mutation("Release"), releasing)
            elif kind == "expire" and model.reservations:
                _, reservation_id, _ = model.reservations[op[1] % len(model.reservations)]
                await harness.conn.execute(
                    "UPDATE budget.holds SET expires_at = now() - interval '1 second'"
                    " WHERE reservation_id = $1",
                    reservation_id,
                )
            elif kind == "sweep":
                await harness.sweeper.sweep()
            elif kind == "resume":
                delta = dict.fromkeys(DIMS, op[2])
                resuming = cmd.ResumeRun(runs[op[1]], delta, "prop")
                await harness.service.resume_run(TENANT, mutation("Resume"), resuming, pickle.dumps)
                for d in DIMS:
                    limit = model.limits[runs[op[1]]][d]
                    if limit is not None:
                        model.limits[runs[op[1]]][d] = limit + op[2]
        except DomainError as refused:
            if refused.reason not in EXPECTED_REFUSALS:  # refusals are part of the protocol
                raise
        _bar(await _balances(harness.conn, model), model)
    await assert_ledger_matches_balances(harness.conn)
