"""A rolling deploy (DESIGN 6, CHANGELOG "Upgrading"): a budget replica of the previous release
and one of this tree serve one database, migrated by this tree, at the same time. Clients
reserve on one replica and settle on the other, runs are closed from either side while calls on
them are in flight, and afterwards the budget audit (ledger = balances = events = holds) holds.

The previous release's code is its commit's tree (`git archive`), run with this venv and
PYTHONPATH pointing at it. Standalone:
    .venv/bin/python -m pytest -p no:cacheprovider tests/system/test_rolling_deploy.py
"""

from __future__ import annotations

import asyncio
import io
import random
import subprocess
import tarfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as pb
from tests.support.audits import audit_budget, wait_for_no_overdue_reservations
from tests.support.budget import Budget
from tests.support.procs import BIN, Proc, clean_env
from tests.support.releases import ROOT, history_problem, releases

pytestmark = pytest.mark.system

RUNS = 8
CLIENTS = 32
ITERATIONS = 10
RUN_LIMIT = 1_000
POOL_LIMIT = 3_500
HOLD_TTL_SECONDS = 2
CLOSE_AFTER = 30  # settled Consumes before half the runs are closed under load
DEADLINE = 90.0  # the whole load is bounded; never a speed assertion
# What a crowded or closed run answers; anything else (INTERNAL above all) fails the test.
EXPECTED = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION)
RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
OLD, NEW = 0, 1


def earlier_releases() -> list[str]:
    """Every release with a commit other than this tree's, newest first: each must serve a
    database beside this tree (a deploy may skip releases, so not only the newest)."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return [r.commit for r in releases() if r.cut and r.commit != head]


@pytest.fixture(scope="module", params=earlier_releases(), ids=lambda commit: commit[:7])
def old_tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    commit = str(request.param)
    problem = history_problem(commit)
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp(f"release-{commit[:7]}")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def test_every_earlier_release_is_deployed_beside_this_tree() -> None:
    assert earlier_releases(), "CHANGELOG.md records no earlier release"


def old_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    # Ahead of this venv's editable install of the current tree (a finder appended to
    # sys.meta_path, so sys.path entries win), generated code included.
    return env | {"PYTHONPATH": f"{tree}:{tree / 'gen' / 'python'}"}


def test_the_old_tree_imports_its_own_code_and_generated_stubs(old_tree: Path) -> None:
    probe = (
        "import budget_service.definition, ration_server.cli, servicekit.migrations;"
        "from ration.budget.v1 import budget_pb2, budget_service_pb2_grpc;"
        "print(budget_service.definition.__file__); print(budget_pb2.__file__);"
        "print(servicekit.migrations.__file__)"
    )
    done = subprocess.run(
        [str(BIN / "python"), "-c", probe],
        env=old_env(clean_env(), old_tree),
        cwd=old_tree,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for path in done.stdout.split():
        assert Path(path).is_relative_to(old_tree), path


@dataclass
class Load:
    budgets: list[Budget]
    rng: random.Random = field(default_factory=lambda: random.Random(22))
    acknowledged: dict[str, int] = field(default_factory=dict)  # consume request_id -> tokens
    answered: Counter[tuple[int, str]] = field(default_factory=Counter)  # (replica, method)
    refused: Counter[str] = field(default_factory=Counter)
    closed: set[str] = field(default_factory=set)
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # some usage is settled

    async def call(self, replica: int, method: str, request: object) -> object | None:
        """The reply, or None for an expected refusal; retries the same request (same
        request_id) on the same replica when it was busy, as the client would elsewhere."""
        failure: grpc.aio.AioRpcError | None = None
        for attempt in range(8):
            try:
                reply = await getattr(self.budgets[replica].stub, method)(request, timeout=10)
            except grpc.aio.AioRpcError as error:
                failure = error
                if error.code() in RETRY:
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                break
            self.answered[(replica, method)] += 1
            return reply
        assert failure is not None
        code = failure.code()
        assert code in EXPECTED, (replica, method, code, failure.details())
        self.refused[f"{method} {code.name}"] += 1
        return None

    async def client(self, index: int) -> None:
        run_id = f"run-{index % RUNS}"
        for step in range(ITERATIONS):
            first = (index + step) % 2  # reserve on one replica, settle on the other
            reserve = pb.ReserveRequest(
                request_id=uuid.uuid4().hex,
                run_id=run_id,
                model="gpt-4o",
                estimate=pb.Amounts(tokens=self.rng.randint(20, 120)),
                ttl_seconds=HOLD_TTL_SECONDS,
            )
            reply = await self.call(first, "Reserve", reserve)
            if reply is None:
                if run_id in self.closed:
                    return
                continue
            assert isinstance(reply, pb.ReserveResponse)
            hold = reply.reservation
            roll = self.rng.random()
            # Every other pair of clients releases its first hold, so both replicas release
            # whatever the interleaving (a random share alone left one side none, now and then).
            release = step == 0 and index % 4 < 2
            if roll < 0.1 and not release:
                continue  # leaked: it expires and stops counting
            if roll < 0.2 or release:
                await self.call(
                    1 - first,
                    "Release",
                    pb.ReleaseRequest(
                        request_id=uuid.uuid4().hex,
                        run_id=run_id,
                        reservation_id=hold.reservation_id,
                    ),
                )
                continue
            usage = self.rng.randint(0, hold.granted.tokens)
            consume = pb.ConsumeRequest(
                request_id=uuid.uuid4().hex,
                run_id=run_id,
                reservation_id=hold.reservation_id,
                model="gpt-4o",
                usage=pb.Amounts(tokens=usage),
            )
            settled = await self.call(1 - first, "Consume", consume)
            if settled is not None:
                self.acknowledged[consume.request_id] = usage
                if len(self.acknowledged) >= CLOSE_AFTER:
                    self.progress.set()

    async def close(self, run_id: str, replica: int) -> None:
        await self.progress.wait()  # mid-load: calls on the run are in flight
        self.closed.add(run_id)
        request = pb.CloseRunRequest(
            request_id=uuid.uuid4().hex, run_id=run_id, outcome=pb.RUN_OUTCOME_SUCCEEDED
        )
        await self.call(replica, "CloseRun", request)  # a failed run may refuse it


async def exercise(addresses: list[str], database_url: str) -> Load:
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    load = Load([Budget(c) for c in channels])
    try:
        setup = load.budgets[OLD]
        await setup.put_scope(
            pb.SCOPE_PROJECT, "proj", kind=pb.SCOPE_BUDGET_KIND_POOLED, max_tokens=POOL_LIMIT
        )
        for run in range(RUNS):  # opened on both sides
            await load.budgets[run % 2].open_run(f"run-{run}", max_tokens=RUN_LIMIT)
        # Half the runs are closed while their clients are still calling, from either side.
        closers = [load.close(f"run-{run}", run // 2 % 2) for run in range(0, RUNS, 2)]

        async def clients() -> None:
            await asyncio.gather(*(load.client(i) for i in range(CLIENTS)))
            load.progress.set()  # should the budgets run out before CLOSE_AFTER

        await asyncio.wait_for(asyncio.gather(clients(), *closers), DEADLINE)
        for run in range(1, RUNS, 2):  # the rest, once quiet, from the other side
            await load.close(f"run-{run}", (run // 2 + 1) % 2)
    finally:
        for channel in channels:
            await channel.close()
    conn = await asyncpg.connect(database_url)
    try:
        await wait_for_no_overdue_reservations(conn)
        rows = await conn.fetch(
            "SELECT request_id, consumed_tokens FROM budget.ledger WHERE decision = 'consume'"
        )
        assert {r["request_id"]: r["consumed_tokens"] for r in rows} == load.acknowledged
        counts = await audit_budget(conn)
        assert counts["grants_checked"] > 0
        assert await conn.fetchval("SELECT count(*) FROM budget.runs WHERE state = 'ACTIVE'") == 0
    finally:
        await conn.close()
    return load


def test_a_previous_release_replica_and_a_current_one_serve_one_database(
    old_tree: Path, database_url: str
) -> None:
    env = clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_SWEEP_INTERVAL_MS="100",
        RATION_DB_POOL_MAX="10",
        RATION_LOG_LEVEL="WARNING",
    )
    argv = [str(BIN / "ration"), "budget", "serve"]
    procs = [Proc.start(argv, old_env(env, old_tree)), Proc.start(argv, env)]
    try:
        for proc in procs:
            proc.wait_for("ready:")
        load = asyncio.run(exercise([p.addresses["budget"] for p in procs], database_url))
    finally:
        codes = [proc.stop() for proc in procs]
    assert codes == [0, 0], [proc.stderr_tail() for proc in procs]
    for replica in (OLD, NEW):  # both sides decided every kind of call
        for method in ("Reserve", "Consume", "Release", "CloseRun"):
            assert load.answered[(replica, method)] > 0, (replica, method, load.answered)
    assert len(load.acknowledged) > 50
    print(dict(load.answered), dict(load.refused))  # shown with -s
