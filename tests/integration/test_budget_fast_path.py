"""The one-round-trip functions (migration 0003) agree with the Python path they implement.

For random runs and call sequences, every Reserve, Consume and Release runs three times on one
connection inside one transaction, so all three see the same database clock: the SQL function
alone, which must either decide exactly as the Python path does or answer 'slow' having written
nothing; the service use case (fast path first, Python path when told); and the Python path
alone, whose effects are kept. Replies, refusals, every row written and the metrics counted
must agree.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import asyncpg
import pytest
from hypothesis import HealthCheck, event, given, settings
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
)
from budget_service.domain.run_state import ReserveMode
from budget_service.store import fast_path as fastpath
from budget_service.store import stored_replies as replies
from budget_service.store.changes import EVENTS_CHANNEL
from budget_service.store.event_hub import EventHub
from budget_service.usecases import reservations as reservations_module
from budget_service.usecases.locked_reservations import LockedReservations
from budget_service.usecases.reservations import Reservations
from budget_service.usecases.runs import BudgetService
from budget_service.usecases.settings import BudgetSettings
from budget_service.usecases.transactions import Transactions
from servicekit.errors import DomainError
from servicekit.idempotency import RequestKey
from servicekit.settings import Env

TENANT = "diff"
MODELS = ("gpt-4o", "gpt-4o-mini", "claude-3", "")


class SavepointDatabase:
    """The Database protocol on one connection: each transaction or statement is a savepoint
    of the test's transaction, so every path sees the same database clock (now())."""

    url = "the test's connection"
    settings = None

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def tenant_transaction(
        self, tenant: str, work: Callable[[Any], Awaitable[Any]], **_: Any
    ) -> Any:
        async with self.conn.transaction():
            await self.conn.execute("SELECT set_config('ration.tenant_id', $1, true)", tenant)
            return await work(self.conn)

    async def transaction(self, work: Callable[[Any], Awaitable[Any]], *, attempts: int = 3) -> Any:
        async with self.conn.transaction():
            return await work(self.conn)

    async def statement(self, work: Callable[[Any], Awaitable[Any]], **_: Any) -> Any:
        async with self.conn.transaction():
            return await work(self.conn)

    async def read(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        return await work(self.conn)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    try:
        yield connection
    finally:
        await connection.close()


def _transactions(
    db: SavepointDatabase, advisory: bool, **settings: str
) -> tuple[Transactions, CollectorRegistry]:
    env = Env({"RATION_ENFORCE": "advisory" if advisory else "hard", **settings})
    registry = CollectorRegistry()
    tx = Transactions(db, BudgetSettings.from_env(env), BudgetMetrics(registry))  # type: ignore[arg-type]
    return tx, registry


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.value
    }


async def _state(conn: asyncpg.Connection, run_id: str, tag: str) -> dict[str, Any]:
    """Every row of the run, its holds, ledger and events, and this example's stored replies
    (decoded: the two paths render the same document with different whitespace)."""
    ledger = await conn.fetch(
        "SELECT * FROM budget.ledger WHERE tenant_id = $1 AND run_id = $2 ORDER BY entry_id",
        TENANT,
        run_id,
    )
    requests = await conn.fetch(
        "SELECT request_id, fingerprint, response FROM budget.request_log"
        " WHERE tenant_id = $1 AND request_id LIKE $2 ORDER BY request_id",
        TENANT,
        f"{tag}%",
    )
    return {
        "run": [
            dict(r)
            for r in await conn.fetch(
                "SELECT * FROM budget.runs WHERE tenant_id = $1 AND run_id = $2", TENANT, run_id
            )
        ],
        "holds": [
            dict(r)
            for r in await conn.fetch(
                "SELECT * FROM budget.holds WHERE tenant_id = $1 AND run_id = $2"
                " ORDER BY reservation_id",
                TENANT,
                run_id,
            )
        ],
        "ledger": [{k: v for k, v in dict(r).items() if k != "entry_id"} for r in ledger],
        "events": [
            dict(r)
            for r in await conn.fetch(
                "SELECT * FROM budget.events WHERE tenant_id = $1 AND run_id = $2 ORDER BY seq",
                TENANT,
                run_id,
            )
        ],
        "requests": [
            (r["request_id"], bytes(r["fingerprint"]), json.loads(r["response"])) for r in requests
        ],
    }


@dataclass
class Outcome:
    """What one execution of a call produced."""

    result: Any = None
    reason: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    metrics: dict[Any, float] = field(default_factory=dict)


async def _run(
    conn: asyncpg.Connection,
    registry: CollectorRegistry,
    call: Callable[[], Awaitable[Any]],
    run_id: str,
    tag: str,
    keep: bool,
) -> Outcome:
    """Runs `call` in a savepoint, records what it did, and keeps or discards its effects."""
    outcome = Outcome()
    savepoint = conn.transaction()
    await savepoint.start()
    try:
        try:
            outcome.result = await call()
        except DomainError as refused:
            outcome.reason = refused.reason
        outcome.state = await _state(conn, run_id, tag)
        outcome.metrics = _samples(registry)
    finally:
        await (savepoint.commit() if keep else savepoint.rollback())
    return outcome


@dataclass
class Call:
    method: str
    mutation: cmd.Mutation
    command: Any
    reservation_id: str = ""


class Differential:
    """Runs each call on the SQL function, the service and the Python path, and compares."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        run_id: str,
        tag: str,
        advisory: bool,
        note: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.conn, self.run_id, self.tag, self.advisory = conn, run_id, tag, advisory
        self.db = SavepointDatabase(conn)
        self.outcomes: list[str] = []
        self.note = note

    async def call(self, call: Call) -> Any:
        key = RequestKey.of(
            TENANT, call.mutation.request_id, call.mutation.method, call.mutation.payload
        )
        before = await _state(self.conn, self.run_id, self.tag)
        answer = fastpath.Answer("slow")

        async def fast() -> fastpath.Answer:
            nonlocal answer
            tx, _ = _transactions(self.db, self.advisory)
            if call.method == "Reserve":
                ttl = call.command.ttl_seconds or tx.settings.default_hold_ttl_seconds
                answer = await fastpath.reserve(
                    self.db,  # type: ignore[arg-type]
                    key,
                    call.command,
                    call.reservation_id,
                    ttl,
                    tx.host_advisory,
                )
            elif call.method == "Consume":
                answer = await fastpath.consume(self.db, key, call.command)  # type: ignore[arg-type]
            else:
                answer = await fastpath.release(self.db, key, call.command)  # type: ignore[arg-type]
            return answer

        sql = await _run(self.conn, CollectorRegistry(), fast, self.run_id, self.tag, keep=False)
        service_tx, service_registry = _transactions(self.db, self.advisory)
        service = Reservations(service_tx)
        with mock.patch.object(
            reservations_module, "new_reservation_id", return_value=call.reservation_id
        ):
            via_service = await _run(
                self.conn,
                service_registry,
                lambda: self._invoke(service, call, locked=False),
                self.run_id,
                self.tag,
                keep=False,
            )
        python_tx, python_registry = _transactions(self.db, self.advisory)
        python = LockedReservations(python_tx)
        via_python = await _run(
            self.conn,
            python_registry,
            lambda: self._invoke(python, call, locked=True),
            self.run_id,
            self.tag,
            keep=True,
        )
        self.outcomes.append(answer.outcome)
        self.note(f"{call.method} {answer.outcome}")
        assert (via_service.result, via_service.reason) == (via_python.result, via_python.reason)
        assert via_service.state == via_python.state
        assert via_service.metrics == via_python.metrics
        if answer.outcome == fastpath.SLOW:
            assert sql.state == before, "a function that answers 'slow' writes nothing"
        elif answer.outcome in (fastpath.DONE, fastpath.REPLAY):
            assert sql.state == via_python.state
            assert self._decode(call.method, answer.response) == via_python.result
        elif answer.outcome == fastpath.REUSED:
            assert via_python.reason == "REQUEST_ID_REUSED"
        else:
            assert via_python.reason == "RUN_NOT_FOUND"
        return via_python.result

    @staticmethod
    async def _invoke(target: Any, call: Call, locked: bool) -> Any:
        if call.method == "Reserve":
            if locked:
                return await target.reserve(
                    TENANT, call.mutation, call.command, call.reservation_id
                )
            return await target.reserve(TENANT, call.mutation, call.command)
        if call.method == "Consume":
            return await target.consume(TENANT, call.mutation, call.command)
        return await target.release(TENANT, call.mutation, call.command)

    @staticmethod
    def _decode(method: str, data: bytes | None) -> Any:
        assert data is not None
        if method == "Reserve":
            return replies.reserve_of(data)
        if method == "Consume":
            return replies.consume_of(data)
        return replies.release_of(data)


def _mutation(tag: str, method: str, command: Any) -> cmd.Mutation:
    return cmd.Mutation(method, f"{tag}-{uuid.uuid4().hex}", repr(command).encode())


async def _open(
    conn: asyncpg.Connection,
    run_id: str,
    policy: BudgetPolicy,
    pooled: bool,
    tag: str,
    owners: str = "run",
) -> None:
    """Opens the run; `owners` decides what binds its limits: the run's own overlay, per-run
    caps of its workflow, agent and project, or a host ceiling on tokens."""
    db = SavepointDatabase(conn)
    ceiling = {"RATION_MAX_BUDGET_TOKENS": "12"} if owners == "host" else {}
    tx, _ = _transactions(db, False, **ceiling)
    service = BudgetService(tx, EventHub("unused", EVENTS_CHANNEL))
    project, workflow, agent = f"proj-{tag}", f"wf-{tag}", f"agent-{tag}"
    scopes = []
    if pooled:
        scopes.append(
            ScopeBudget(
                Scope.PROJECT, project, ScopeBudgetKind.POOLED, BudgetPolicy(max_tokens=10**6)
            )
        )
    if owners == "scopes":  # tokens bound by the project, cost by the agent, tools by the workflow
        caps = {
            Scope.PROJECT: BudgetPolicy(max_tokens=10, max_cost_nanos=40, max_tool_calls=9),
            Scope.AGENT: BudgetPolicy(max_tokens=30, max_cost_nanos=11, max_tool_calls=9),
            Scope.WORKFLOW: BudgetPolicy(max_tokens=30, max_cost_nanos=40, max_tool_calls=2),
        }
        ids = {Scope.PROJECT: project, Scope.AGENT: agent, Scope.WORKFLOW: workflow}
        for scope, cap in caps.items():
            scopes.append(ScopeBudget(scope, ids[scope], ScopeBudgetKind.PER_RUN, cap))
    for budget in scopes:
        await service.put_scope_budget(
            TENANT, _mutation(tag, "Put", budget), budget, lambda _: b"{}"
        )
    command = cmd.OpenRun(run_id, project, workflow, agent, policy)
    await service.open_run(TENANT, _mutation(tag, "OpenRun", command), command, lambda _: b"{}")


# Small limits and amounts, so that runs fill up, cross thresholds at exact boundaries, get
# granted UP_TO less than asked, breach, and fail or stop within a dozen calls.
_limit = st.one_of(st.none(), st.integers(min_value=8, max_value=30))
_policies = st.builds(
    BudgetPolicy,
    max_tokens=_limit,
    max_cost_nanos=st.one_of(_limit, st.just(0)),
    max_tool_calls=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
    max_retries=st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
    model_allow=st.sampled_from([None, None, ("gpt-*",), ("gpt-4o", "claude-*"), ()]),
    model_deny=st.sampled_from([(), (), ("*mini",)]),
    threshold_percent=st.one_of(
        st.none(), st.sampled_from([0, 50, 80, 100]), st.integers(min_value=0, max_value=100)
    ),
    on_exhaustion=st.sampled_from(list(OnExhaustion)),
)
_amount = st.one_of(st.just(0), st.just(0), st.integers(min_value=1, max_value=12))
_amounts = st.fixed_dictionaries(
    {
        Dimension.TOKENS: _amount,
        Dimension.COST: _amount,
        Dimension.TOOL_CALLS: st.sampled_from([0, 0, 1]),
        Dimension.RETRIES: st.sampled_from([0, 0, 0, 1]),
    }
)
_index = st.integers(min_value=-1, max_value=5)  # -1: an id no hold has
_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("reserve"),
            _amounts,
            st.sampled_from(list(ReserveMode)),
            st.sampled_from(MODELS),
            st.sampled_from([0, 1, 60]),
        ),
        st.tuples(st.just("consume"), _index, _amounts, st.sampled_from(MODELS)),
        st.tuples(st.just("unreserved"), _amounts, st.sampled_from(MODELS)),
        st.tuples(st.just("release"), _index),
        st.tuples(st.just("expire"), st.integers(min_value=0, max_value=5)),
        st.tuples(st.just("again"), st.integers(min_value=0, max_value=20)),
        st.tuples(st.just("reuse"), st.integers(min_value=0, max_value=20)),
    ),
    min_size=1,
    max_size=16,
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    policy=_policies,
    pooled=st.sampled_from([False] * 5 + [True]),
    owners=st.sampled_from(["run", "run", "scopes", "host"]),
    advisory=st.sampled_from([False] * 5 + [True]),
    ops=_ops,
)
async def test_the_functions_decide_like_the_python_path(
    conn: asyncpg.Connection,
    policy: BudgetPolicy,
    pooled: bool,
    owners: str,
    advisory: bool,
    ops: list[tuple[Any, ...]],
) -> None:
    tag = f"d{uuid.uuid4().hex[:10]}"
    run_id = f"run-{tag}"
    example = conn.transaction()  # one clock for every call; rolled back at the end
    await example.start()
    try:
        await _open(conn, run_id, policy, pooled, tag, owners)
        check = Differential(conn, run_id, tag, advisory, note=event)
        reservations: list[str] = []
        done: list[Call] = []
        for op in ops:
            call = _call(op, tag, run_id, reservations, done)
            if op[0] == "expire":
                if reservations:
                    await conn.execute(
                        "UPDATE budget.holds SET expires_at = now() - interval '1 second'"
                        " WHERE tenant_id = $1 AND reservation_id = $2",
                        TENANT,
                        reservations[op[1] % len(reservations)],
                    )
                continue
            if call is None or not any(getattr(call.command, "estimate", {1: 1}).values()):
                continue
            result = await check.call(call)
            done.append(call)
            if call.method == "Reserve" and result is not None:
                reservations.append(result.reservation.reservation_id)
    finally:
        await example.rollback()


def _call(
    op: tuple[Any, ...], tag: str, run_id: str, reservations: list[str], done: list[Call]
) -> Call | None:
    kind = op[0]
    if kind in ("again", "reuse"):
        if not done:
            return None
        earlier = done[op[1] % len(done)]
        if kind == "again":
            return earlier
        other = cmd.Mutation(
            earlier.mutation.method, earlier.mutation.request_id, earlier.mutation.payload + b"!"
        )
        return Call(earlier.method, other, earlier.command, earlier.reservation_id)
    if kind == "reserve":
        command: Any = cmd.Reserve(run_id, op[3], op[1], op[4], op[2])
        return Call(
            "Reserve", _mutation(tag, "Reserve", command), command, f"res_{uuid.uuid4().hex}"
        )
    if kind in ("consume", "release"):
        index = op[1]
        reservation_id = (
            reservations[index % len(reservations)]
            if reservations and index >= 0
            else "res_unknown"
        )
        if kind == "release":
            command = cmd.Release(run_id, reservation_id)
            return Call("Release", _mutation(tag, "Release", command), command)
        command = cmd.Consume(run_id, reservation_id, op[3], op[2])
        return Call("Consume", _mutation(tag, "Consume", command), command)
    if kind == "unreserved":
        command = cmd.Consume(run_id, "", op[2], op[1])
        return Call("Consume", _mutation(tag, "Consume", command), command)
    return None


async def _scenario(
    conn: asyncpg.Connection, policy: BudgetPolicy, pooled: bool = False, advisory: bool = False
) -> tuple[Differential, str, str]:
    tag = f"s{uuid.uuid4().hex[:10]}"
    run_id = f"run-{tag}"
    await _open(conn, run_id, policy, pooled, tag)
    return Differential(conn, run_id, tag, advisory), run_id, tag


def _reserve(tag: str, run_id: str, model: str = "gpt-4o", **estimate: int) -> Call:
    amounts = {Dimension(k): v for k, v in estimate.items()}
    command = cmd.Reserve(run_id, model, amounts, 60, ReserveMode.ALL_OR_NOTHING)
    return Call("Reserve", _mutation(tag, "Reserve", command), command, f"res_{uuid.uuid4().hex}")


def _consume(tag: str, run_id: str, reservation_id: str = "", **usage: int) -> Call:
    amounts = {Dimension(k): v for k, v in usage.items()}
    command = cmd.Consume(run_id, reservation_id, "gpt-4o", amounts)
    return Call("Consume", _mutation(tag, "Consume", command), command)


def _release(tag: str, run_id: str, reservation_id: str) -> Call:
    command = cmd.Release(run_id, reservation_id)
    return Call("Release", _mutation(tag, "Release", command), command)


async def test_the_common_calls_are_decided_in_one_statement(conn: asyncpg.Connection) -> None:
    example = conn.transaction()
    await example.start()
    try:
        policy = BudgetPolicy(max_tokens=100, max_cost_nanos=10**9, threshold_percent=50)
        check, run_id, tag = await _scenario(conn, policy)
        first = await check.call(_reserve(tag, run_id, tokens=40, cost=10))
        consume = _consume(tag, run_id, first.reservation.reservation_id, tokens=60, cost=10)
        await check.call(consume)  # crosses the threshold, overruns the hold
        second = await check.call(_reserve(tag, run_id, tokens=40))
        await check.call(_release(tag, run_id, second.reservation.reservation_id))
        await check.call(_consume(tag, run_id, tokens=40))  # exactly spent: exhausted
        await check.call(consume)  # the same request again
        reused = cmd.Mutation("Consume", consume.mutation.request_id, b"another payload")
        await check.call(Call("Consume", reused, consume.command))
        missing = _reserve(tag, "run-nobody-opened", tokens=1)
        await check.call(missing)
        assert check.outcomes == ["done"] * 5 + ["replay", "reused", "not_found"]

        check, run_id, tag = await _scenario(conn, BudgetPolicy(max_tokens=10, max_cost_nanos=5))
        partial = _reserve(tag, run_id, tokens=8, cost=3)
        await check.call(partial)
        up_to = cmd.Reserve(run_id, "gpt-4o", {Dimension.TOKENS: 5}, 60, ReserveMode.UP_TO)
        granted = await check.call(Call("Reserve", _mutation(tag, "Reserve", up_to), up_to, "r2"))
        assert granted.reservation.granted[Dimension.TOKENS] == 2  # what was left
        await check.call(_consume(tag, run_id, tokens=0, cost=2))  # cost now exactly spent
        assert check.outcomes == ["done"] * 3
    finally:
        await example.rollback()


async def test_everything_else_is_left_to_the_python_path(conn: asyncpg.Connection) -> None:
    example = conn.transaction()
    await example.start()
    try:
        policy = BudgetPolicy(max_tokens=100, max_tool_calls=1, model_deny=("*mini",))
        check, run_id, tag = await _scenario(conn, policy)
        await check.call(_reserve(tag, run_id, "gpt-4o-mini", tokens=1))  # model denied
        held = await check.call(_reserve(tag, run_id, tokens=90, toolCalls=1))
        await check.call(_reserve(tag, run_id, tokens=20))  # contention
        await check.call(_consume(tag, run_id, "res_unknown", tokens=1))  # not found
        await check.call(_consume(tag, run_id, held.reservation.reservation_id, tokens=1))
        await check.call(_release(tag, run_id, held.reservation.reservation_id))  # settled
        await check.call(_consume(tag, run_id, tokens=100))  # one past the limit: a breach
        await check.call(_reserve(tag, run_id, tokens=1))  # the run has failed
        assert check.outcomes == ["slow", "done", "slow", "slow", "done", "slow", "slow", "slow"]

        check, run_id, tag = await _scenario(conn, BudgetPolicy(max_tokens=100))
        held = await check.call(_reserve(tag, run_id, tokens=10))
        await conn.execute(
            "UPDATE budget.holds SET expires_at = now() - interval '1 second'"
            " WHERE tenant_id = $1 AND reservation_id = $2",
            TENANT,
            held.reservation.reservation_id,
        )
        await check.call(_reserve(tag, run_id, tokens=10))  # an overdue hold expires first
        assert check.outcomes == ["done", "slow"]

        for pooled, advisory in ((True, False), (False, True)):
            check, run_id, tag = await _scenario(
                conn, BudgetPolicy(max_tokens=100), pooled=pooled, advisory=advisory
            )
            await check.call(_reserve(tag, run_id, tokens=10))
            await check.call(_consume(tag, run_id, tokens=10))
            assert check.outcomes[0] == "slow"
            assert check.outcomes[1] == ("slow" if pooled else "done")
    finally:
        await example.rollback()
