"""Issue 27, acceptance 1: an end-user's DAY pool shared by the runs of two projects, spent
through two replicas on one database at once, is exact and then refuses (naming the end-user
scope) while every run stays ACTIVE; the report by end-user equals the test's own sums; the
tenant stream carries the pool's own events; bad end-user ids, tags and budgets are refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetHeld,
    Dimension,
    InvalidRequest,
    Policy,
    RunExists,
    RunState,
    Scope,
    ScopeBudgetKind,
    SpendGroupBy,
    Window,
)
from tests.support.budget import Budget, new_id, pool_events
from tests.support.replicas import budget_processes
from tests.support.servers import SharedServers

POOL = 1000
STEP = 40  # 25 steps spend the pool exactly
RUNS = [(f"run-{i}", "p-one" if i % 2 else "p-two") for i in range(12)]


@pytest.fixture
def addresses(database_url: str) -> Iterator[list[str]]:
    """Two `ration budget serve` processes on a database of the test's own (the acceptance
    test sums the whole tenant's spend and reads its stream from the start)."""
    with budget_processes(database_url) as procs:
        yield [p.addresses["budget"] for p in procs]


@pytest.fixture(scope="module")
def shared_addresses(shared_database_url: str) -> Iterator[list[str]]:
    """Two `ration budget serve` processes on the module's database, for the tests that keep
    to runs of their own (fresh run ids)."""
    with budget_processes(shared_database_url) as procs:
        yield [p.addresses["budget"] for p in procs]


@contextlib.asynccontextmanager
async def clients_of(addresses: list[str]) -> AsyncIterator[list[BudgetClient]]:
    """A client on each replica."""
    clients = [BudgetClient(address) for address in addresses]
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


@pytest.fixture
async def replicas(addresses: list[str]) -> AsyncIterator[list[BudgetClient]]:
    async with clients_of(addresses) as clients:
        yield clients


@pytest.fixture
async def shared_replicas(shared_addresses: list[str]) -> AsyncIterator[list[BudgetClient]]:
    async with clients_of(shared_addresses) as clients:
        yield clients


async def spend(client: BudgetClient, run_id: str) -> tuple[int, list[BudgetExhausted]]:
    """Reserve and consume STEP tokens until the pool refuses; returns what was consumed."""
    consumed = 0
    while True:
        try:
            hold = await client.reserve(run_id, model="m", estimate=Amounts(tokens=STEP))
        except BudgetHeld:  # another run's hold takes the room: it is consumed soon
            await asyncio.sleep(0.01)
            continue
        except BudgetExhausted as refused:
            return consumed, [refused]
        await client.consume(
            run_id,
            usage=Amounts(tokens=STEP),
            model="m",
            reservation_id=hold.reservation.reservation_id,
        )
        consumed += STEP


async def test_an_end_user_day_pool_is_exact_across_two_replicas_and_two_projects(
    replicas: list[BudgetClient], addresses: list[str]
) -> None:
    a, b = replicas
    before = datetime.now(UTC) - timedelta(minutes=1)
    await a.put_scope_budget(
        Scope.END_USER,
        "cust-1",
        ScopeBudgetKind.POOLED,
        policy=Policy(max_tokens=POOL),
        window=Window.DAY,
    )
    for i, (run_id, project) in enumerate(RUNS):
        run = await replicas[i % 2].open_run(
            run_id, project_id=project, end_user_id="cust-1", tags={"tier": "gold"}
        )
        assert (run.end_user_id, dict(run.tags)) == ("cust-1", {"tier": "gold"})
    await b.open_run("other", project_id="p-one", end_user_id="cust-2")

    results = await asyncio.gather(
        *(spend(replicas[i % 2], run_id) for i, (run_id, _) in enumerate(RUNS))
    )
    own = {"cust-1": sum(c for c, _ in results)}
    assert own["cust-1"] == POOL  # exact: every grant fit, nothing beyond
    for _, (refused,) in results:
        assert (refused.reason, refused.metadata["scope"], refused.metadata["scopeId"]) == (
            "BUDGET_EXHAUSTED",
            "end_user",
            "cust-1",
        )
        assert refused.retry_after is not None  # until the next UTC midnight
    # Another end-user is not limited by it.
    other = await b.reserve("other", model="m", estimate=Amounts(tokens=30))
    await b.consume(
        "other",
        usage=Amounts(tokens=30),
        model="m",
        reservation_id=other.reservation.reservation_id,
    )
    own["cust-2"] = 30

    for run_id, _ in RUNS:  # a pool refuses; the runs live
        assert (await a.get_run(run_id)).state is RunState.ACTIVE
    pool = await b.get_scope_budget(Scope.END_USER, "cust-1", ScopeBudgetKind.POOLED)
    assert pool.balance is not None
    tokens = [s for s in pool.balance.dimensions if s.dimension is Dimension.TOKENS]
    assert [(s.consumed, s.held) for s in tokens] == [(POOL, 0)]

    after = datetime.now(UTC) + timedelta(minutes=1)
    for client in replicas:
        rows = await client.report_spend_all(before, after, SpendGroupBy.END_USER)
        assert {r.key: r.tokens for r in rows} == own
        by_tag = await client.report_spend_all(before, after, SpendGroupBy.TAG, tag_key="tier")
        assert {r.key: r.tokens for r in by_tag} == {"gold": POOL, "": 30}

    async with grpc.aio.insecure_channel(addresses[1]) as channel:
        events = await pool_events(Budget(channel), 2)
    assert [(e.event.type, e.pool_scope, e.pool_scope_id) for e in events] == [
        ("budget.threshold.crossed", pb.SCOPE_END_USER, "cust-1"),
        ("budget.exhausted", pb.SCOPE_END_USER, "cust-1"),
    ]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"end_user_id": "has space"}, "end_user_id"),
        ({"end_user_id": "x" * 129}, "end_user_id"),
        ({"tags": {f"k{i}": "v" for i in range(17)}}, "tags"),
        ({"tags": {"bad key": "v"}}, "tags"),
        ({"tags": {"k" * 65: "v"}}, "tags"),
        ({"tags": {"k": "v" * 257}}, "tags[k]"),
        ({"tags": {"k": "line\nbreak"}}, "tags[k]"),
    ],
)
async def test_bad_end_user_ids_and_tags_are_refused_field_by_field(
    shared_replicas: list[BudgetClient], fields: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await shared_replicas[0].open_run(new_id("r"), project_id="p", **fields)  # type: ignore[arg-type]
    assert [f for f, _ in refused.value.violations] == [field]


async def test_end_user_budgets_are_pools_without_model_lists(
    shared_replicas: list[BudgetClient],
) -> None:
    client = shared_replicas[0]
    with pytest.raises(InvalidRequest) as refused:
        await client.put_scope_budget(
            Scope.END_USER, "cust", ScopeBudgetKind.PER_RUN_CAP, policy=Policy(max_tokens=5)
        )
    assert [f for f, _ in refused.value.violations] == ["budget.kind"]
    with pytest.raises(InvalidRequest) as refused:
        await client.put_scope_budget(
            Scope.END_USER,
            "cust",
            ScopeBudgetKind.POOLED,
            policy=Policy(max_tokens=5, model_deny=("gpt-*",)),
        )
    assert [f for f, _ in refused.value.violations] == ["budget.policy"]


async def test_reopening_a_run_for_another_end_user_or_tags_is_run_exists(
    shared_replicas: list[BudgetClient],
) -> None:
    a, b = shared_replicas
    same = new_id("same")
    first = await a.open_run(same, project_id="p", end_user_id="cust-1", tags={"k": "v"})
    again = await b.open_run(same, project_id="p", end_user_id="cust-1", tags={"k": "v"})
    assert again.created_at == first.created_at  # the same run, returned again
    for other in ({"end_user_id": "cust-2", "tags": {"k": "v"}}, {"end_user_id": "cust-1"}):
        with pytest.raises(RunExists):
            await b.open_run(same, project_id="p", **other)


async def test_check_and_reserve_name_the_end_user_pool_that_refuses(
    shared_servers: SharedServers,
) -> None:
    """On the engine (decide_v2): a Check and a Reserve refused by an end-user pool name it,
    and Check lists the pool's balance under its scope and id after the run's own four."""
    end_user, run = new_id("cust"), new_id("r")
    async with BudgetClient(shared_servers.address("budget")) as client:
        await client.put_scope_budget(
            Scope.END_USER, end_user, ScopeBudgetKind.POOLED, policy=Policy(max_tokens=10)
        )
        await client.open_run(run, project_id="p", end_user_id=end_user, tags={"a": "b"})
        checked = await client.check(run, estimate=Amounts(tokens=11), model="m")
        assert (checked.would_grant, checked.refusal_reason) == (False, "BUDGET_EXHAUSTED")
        pools = [(d.binding_scope, d.binding_scope_id, d.limit) for d in checked.dimensions[4:]]
        assert pools == [(Scope.END_USER, end_user, 10)]
        with pytest.raises(BudgetExhausted) as refused:
            await client.reserve(run, model="m", estimate=Amounts(tokens=11))
        metadata = refused.value.metadata
        assert (metadata["scope"], metadata["scopeId"]) == ("end_user", end_user)
        assert (await client.check(run, estimate=Amounts(tokens=10), model="m")).would_grant
