"""ReportSpend against a real server: the ledger's exact sums per grouping equal the sums of the
Consumes made, page by page, per filter and per tenant; bad input is refused field by field."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import asyncpg
import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from ration.budget.v1 import budget_pb2 as pb
from ration.budget.v1 import budget_service_pb2_grpc
from ration_client import Amounts, BudgetClient, InvalidRequest, SpendGroupBy, SpendRow
from tests.support.budget import ROLLUP_COLUMNS, ROLLUPS_OF_LEDGER, new_id
from tests.support.errors import rpc_error
from tests.support.servers import SharedServers, StartServer
from tests.support.token_files import write_token_file

PROJECTS = ("p-alpha", "p-beta", "p-gamma")
WORKFLOWS = ("wf-1", "wf-2", "")
AGENTS = ("agent-1", "agent-2", "")
END_USERS = ("eu-1", "eu-2", "")
TEAMS = ("red", "blue", "")  # the value of tag "team" ("": the run has no such tag)
MODELS = ("gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "llama-3.1-70b")
DAY_ONE = datetime(2025, 3, 1, tzinfo=UTC)
DAY_TWO = DAY_ONE + timedelta(days=1)
TWO_DAYS = (DAY_ONE, DAY_TWO + timedelta(days=1))
Totals = tuple[int, int, int, int, int]  # cost nanos, tokens, tool calls, retries, consumes


@dataclass(frozen=True)
class Made:
    """One Consume the test made: its run's owners, its model, its usage and the instant the
    test later gives its ledger row."""

    request_id: str
    project: str
    workflow: str
    agent: str
    model: str
    usage: Amounts
    at: datetime
    end_user: str = ""
    team: str = ""

    def key(self, group: SpendGroupBy) -> str:
        if group is SpendGroupBy.DAY:
            return self.at.strftime("%Y-%m-%dT00:00:00Z")
        if group is SpendGroupBy.HOUR:
            return self.at.strftime("%Y-%m-%dT%H:00:00Z")
        return {
            SpendGroupBy.PROJECT: self.project,
            SpendGroupBy.WORKFLOW: self.workflow,
            SpendGroupBy.AGENT: self.agent,
            SpendGroupBy.MODEL: self.model,
            SpendGroupBy.END_USER: self.end_user,
            SpendGroupBy.API_KEY: "",  # no run here was opened with an issued key
            SpendGroupBy.TAG: self.team,  # reports by tag here ask for tag "team"
        }[group]


def expected(made: Iterable[Made], group: SpendGroupBy) -> dict[str, Totals]:
    sums: dict[str, list[int]] = {}
    for m in made:
        total = sums.setdefault(m.key(group), [0, 0, 0, 0, 0])
        u = m.usage
        for i, amount in enumerate((u.cost_nanos, u.tokens, u.tool_calls, u.retries, 1)):
            total[i] += amount
    return {key: (t[0], t[1], t[2], t[3], t[4]) for key, t in sums.items()}


def reported(rows: Iterable[SpendRow]) -> dict[str, Totals]:
    found: dict[str, Totals] = {}
    for r in rows:
        assert r.key not in found, f"{r.key!r} reported twice"
        found[r.key] = (r.cost_nanos, r.tokens, r.tool_calls, r.retries, r.consume_count)
    return found


async def make_consumes(budget: BudgetClient, rng: random.Random, count: int) -> list[Made]:
    """Random usage on runs of 3 projects (with and without workflow and agent), 4 models,
    with and without holds, some retried with the same request_id (recorded once)."""
    runs = []
    for i in range(8):
        owners = (rng.choice(PROJECTS), rng.choice(WORKFLOWS), rng.choice(AGENTS))
        extra = (rng.choice(END_USERS), rng.choice(TEAMS))
        run_id = f"run-{i}"
        project, workflow, agent = owners
        await budget.open_run(
            run_id,
            project_id=project,
            workflow_id=workflow,
            agent_id=agent,
            end_user_id=extra[0],
            tags={"team": extra[1], "other": "x"} if extra[1] else {"other": "y"},
        )
        runs.append((run_id, owners, extra))
    made = []
    for _ in range(count):
        run_id, (project, workflow, agent), (end_user, team) = rng.choice(runs)
        tool_only = rng.random() < 0.15
        model = "" if tool_only else rng.choice(MODELS)
        usage = Amounts(
            tokens=0 if tool_only else rng.randint(0, 50_000),
            cost_nanos=0 if tool_only else rng.randint(0, 3 * 10**9),
            tool_calls=rng.randint(1, 3) if tool_only else rng.choice((0, 0, 1)),
            retries=rng.choice((0, 0, 0, 1)),
        )
        request_id = new_id("consume")
        reservation_id = ""
        if not tool_only and rng.random() < 0.5:  # settles a hold smaller than the bill
            held = await budget.reserve(run_id, model=model, estimate=Amounts(tokens=100))
            reservation_id = held.reservation.reservation_id
        for _ in range(2 if rng.random() < 0.2 else 1):
            await budget.consume(
                run_id,
                usage=usage,
                model=model,
                reservation_id=reservation_id,
                request_id=request_id,
            )
        at = rng.choice((DAY_ONE, DAY_TWO)) + timedelta(seconds=rng.randrange(86_400))
        made.append(Made(request_id, project, workflow, agent, model, usage, at, end_user, team))
    return made


# The spend rollups of a ledger whose times the test rewrote: summed again from it (a Consume
# keeps them in step by itself).
ROLLUPS_AGAIN = (
    "DELETE FROM budget.spend_rollups",
    f"INSERT INTO budget.spend_rollups ({ROLLUP_COLUMNS}) {ROLLUPS_OF_LEDGER}",
)


async def stamp(db: asyncpg.Connection, made: Iterable[Made]) -> None:
    """Gives each consume ledger row the instant the test chose (the ledger is append-only for
    the service; as superuser the test turns its trigger off for this one transaction), and
    the rollups the sums of the rewritten ledger."""
    async with db.transaction():
        await db.execute("SET LOCAL session_replication_role = replica")
        await db.executemany(
            "UPDATE budget.ledger SET created_at = $2 WHERE request_id = $1"
            " AND decision = 'consume'",
            [(m.request_id, m.at) for m in made],
        )
        for statement in ROLLUPS_AGAIN:
            await db.execute(statement)


async def pages(
    budget: BudgetClient, group: SpendGroupBy, page_size: int, **filters: str
) -> list[SpendRow]:
    """Every row, one page of at most `page_size` at a time; keys ascend across pages."""
    rows: list[SpendRow] = []
    token = ""
    while True:
        start, end = TWO_DAYS
        tag_key = "team" if group is SpendGroupBy.TAG else ""
        page = await budget.report_spend(
            start, end, group, page_size=page_size, page_token=token, tag_key=tag_key, **filters
        )
        assert len(page.rows) <= page_size
        assert page.rows or not rows, "only a report with no rows has an empty page"
        rows.extend(page.rows)
        token = page.next_page_token
        if not token:
            keys = [r.key.encode() for r in rows]
            assert keys == sorted(keys)
            return rows


@pytest.fixture
async def budget_address(start_server: StartServer) -> str:
    runner = await start_server("budget")
    return f"127.0.0.1:{runner.port}"


@pytest.fixture
async def budget(budget_address: str) -> AsyncIterator[BudgetClient]:
    async with BudgetClient(budget_address) as client:
        yield client


async def test_reports_equal_the_sums_of_the_consumes_made_for_every_grouping(
    budget: BudgetClient, db: asyncpg.Connection
) -> None:
    rng = random.Random(20250301)
    before = datetime.now(UTC) - timedelta(minutes=1)
    made = await make_consumes(budget, rng, 60)
    after = datetime.now(UTC) + timedelta(minutes=1)
    # As the server recorded them (its clock): every owner and model grouping.
    for group in (SpendGroupBy.PROJECT, SpendGroupBy.WORKFLOW, SpendGroupBy.AGENT):
        rows = await budget.report_spend_all(before, after, group)
        assert reported(rows) == expected(made, group)
    rows = await budget.report_spend_all(before, after, SpendGroupBy.MODEL)
    assert reported(rows) == expected(made, SpendGroupBy.MODEL)

    assert len(expected(made, SpendGroupBy.MODEL)) == len(MODELS) + 1  # and tool calls: ""
    # Over two days the test controls: every grouping, page by page.
    await stamp(db, made)
    for group in SpendGroupBy:
        for page_size in (1, 3, 1000):
            assert reported(await pages(budget, group, page_size)) == expected(made, group)
    # Acceptance: by model and day (3 projects, 4 models, 2 days) equals the Consumes made.
    for model in MODELS:
        rows = await pages(budget, SpendGroupBy.DAY, 1, model=model)
        assert len(rows) == 2
        assert reported(rows) == expected([m for m in made if m.model == model], SpendGroupBy.DAY)
    # Filters are exact matches, combined.
    by_model = SpendGroupBy.MODEL
    for project in PROJECTS:
        rows = await pages(budget, by_model, 2, project_id=project)
        assert reported(rows) == expected([m for m in made if m.project == project], by_model)
    rows = await pages(budget, SpendGroupBy.HOUR, 5, project_id="p-alpha", agent_id="agent-1")
    alpha_agent_1 = [m for m in made if (m.project, m.agent) == ("p-alpha", "agent-1")]
    assert alpha_agent_1, "the seed makes usage of this pair"
    assert reported(rows) == expected(alpha_agent_1, SpendGroupBy.HOUR)
    assert await pages(budget, SpendGroupBy.PROJECT, 2, model="gpt-4o-mini*") == []
    # By end-user and filtered by one (issue 27): the same exact sums.
    assert len(expected(made, SpendGroupBy.END_USER)) > 1
    for end_user in ("eu-1", "eu-2"):
        rows = await pages(budget, by_model, 2, end_user_id=end_user)
        assert reported(rows) == expected([m for m in made if m.end_user == end_user], by_model)


async def test_the_window_includes_its_start_and_excludes_its_end(
    budget: BudgetClient, db: asyncpg.Connection
) -> None:
    await budget.open_run("edge", project_id="p")
    usage = Amounts(tokens=7, cost_nanos=1)
    at_midnight = Made(new_id(), "p", "", "", "m", usage, DAY_TWO)
    await budget.consume("edge", usage=usage, model="m", request_id=at_midnight.request_id)
    await stamp(db, [at_midnight])
    before = await budget.report_spend_all(DAY_ONE, DAY_TWO, SpendGroupBy.DAY)
    from_it = await budget.report_spend_all(DAY_TWO, DAY_TWO + timedelta(hours=1), SpendGroupBy.DAY)
    assert before == []
    assert [(r.key, r.bucket_start, r.tokens) for r in from_it] == [
        ("2025-03-02T00:00:00Z", DAY_TWO, 7)
    ]
    assert (from_it[0].cost_nanos, from_it[0].cost) == (1, Decimal("0.000000001"))


def token_file(path: Path) -> Path:
    return write_token_file(
        path,
        ("reader-a", "a", ["reader"]),
        ("writer-a", "a", ["writer"]),
        ("writer-b", "b", ["writer"]),
    )


async def test_a_tenant_reports_only_its_own_spend_and_a_reader_may_ask(
    start_server: StartServer, tmp_path: Path
) -> None:
    runner = await start_server("budget", RATION_TOKEN_FILE=str(token_file(tmp_path / "t.json")))
    address = f"127.0.0.1:{runner.port}"
    window = (datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1))
    for token, tokens in (("writer-a", 10), ("writer-b", 1000)):
        async with BudgetClient(address, token=token) as writer:
            await writer.open_run("same-run-id", project_id="same-project")
            await writer.consume("same-run-id", model="m", usage=Amounts(tokens=tokens))
    async with BudgetClient(address, token="reader-a") as reader:
        rows = await reader.report_spend_all(*window, SpendGroupBy.PROJECT)
    assert [(r.key, r.tokens, r.consume_count) for r in rows] == [("same-project", 10, 1)]


def request(**fields: object) -> pb.ReportSpendRequest:
    start = Timestamp(seconds=int(DAY_ONE.timestamp()))
    end = Timestamp(seconds=int(DAY_TWO.timestamp()))
    values: dict[str, object] = {
        "start_time": start,
        "end_time": end,
        "group_by": pb.SPEND_GROUP_BY_MODEL,
    }
    values.update(fields)
    return pb.ReportSpendRequest(**{k: v for k, v in values.items() if v is not None})  # type: ignore[arg-type]


def seconds(value: datetime) -> Timestamp:
    return Timestamp(seconds=int(value.timestamp()))


BAD = {
    "no start": (request(start_time=None), ["start_time"]),
    "no end": (request(end_time=None), ["end_time"]),
    "end before start": (request(end_time=seconds(DAY_ONE - timedelta(seconds=1))), ["end_time"]),
    "empty window": (request(end_time=seconds(DAY_ONE)), ["end_time"]),
    "over 366 days": (request(end_time=seconds(DAY_ONE + timedelta(days=367))), ["end_time"]),
    "year 10000": (request(end_time=Timestamp(seconds=253_402_300_800)), ["end_time"]),
    "no grouping": (request(group_by=0), ["group_by"]),
    "unknown grouping": (request(group_by=99), ["group_by"]),
    "long project": (request(filter=pb.SpendFilter(project_id="p" * 129)), ["filter.project_id"]),
    "model with space": (request(filter=pb.SpendFilter(model="gpt 4o")), ["filter.model"]),
    "every filter bad": (
        request(
            filter=pb.SpendFilter(
                project_id="a b", workflow_id="w" * 129, agent_id="\n", model="m" * 201
            )
        ),
        ["filter.project_id", "filter.workflow_id", "filter.agent_id", "filter.model"],
    ),
    "page too large": (request(page_size=1001), ["page_size"]),
    "negative page": (request(page_size=-1), ["page_size"]),
    "garbage token": (request(page_token="not-a-token"), ["page_token"]),
}


# Refusals write nothing: these tests share the module's server and database. The reports
# above sum a whole tenant's spend, so each of those keeps a database of its own.
@pytest.mark.parametrize(("bad", "fields"), list(BAD.values()), ids=list(BAD))
async def test_bad_report_requests_are_refused_with_their_fields(
    shared_budget_channel: grpc.aio.Channel, bad: pb.ReportSpendRequest, fields: list[str]
) -> None:
    stub = budget_service_pb2_grpc.BudgetServiceStub(shared_budget_channel)  # type: ignore[no-untyped-call]
    refused = await rpc_error(stub.ReportSpend(bad))
    assert (refused.code, refused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    from google.rpc import error_details_pb2

    violations = refused.require(error_details_pb2.BadRequest).field_violations
    assert [v.field for v in violations] == fields


async def test_a_page_token_serves_only_the_report_it_came_from(budget: BudgetClient) -> None:
    await budget.open_run("r", project_id="p")
    for model in ("a", "b"):
        await budget.consume("r", model=model, usage=Amounts(tokens=1))
    window = (datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1))
    first = await budget.report_spend(*window, SpendGroupBy.MODEL, page_size=1)
    assert [r.key for r in first.rows] == ["a"]
    nxt = await budget.report_spend(
        *window, SpendGroupBy.MODEL, page_size=5, page_token=first.next_page_token
    )
    assert ([r.key for r in nxt.rows], nxt.next_page_token) == (["b"], "")
    token = first.next_page_token
    with pytest.raises(InvalidRequest) as other_grouping:
        await budget.report_spend(*window, SpendGroupBy.PROJECT, page_token=token)
    with pytest.raises(InvalidRequest) as other_filter:
        await budget.report_spend(*window, SpendGroupBy.MODEL, project_id="p", page_token=token)
    later = window[1] + timedelta(seconds=1)
    with pytest.raises(InvalidRequest) as other_window:
        await budget.report_spend(window[0], later, SpendGroupBy.MODEL, page_token=token)
    for refused in (other_grouping, other_filter, other_window):
        assert [f for f, _ in refused.value.violations] == ["page_token"]


async def test_ration_report_prints_the_table(budget: BudgetClient, budget_address: str) -> None:
    await budget.open_run("cli", project_id="travel", agent_id="booker")
    await budget.consume("cli", model="gpt-4o", usage=Amounts(tokens=1200, cost_nanos=1_500_000))
    await budget.consume("cli", model="gpt-4o", usage=Amounts(tokens=800, cost_nanos=2_000_000))
    await budget.consume("cli", model="claude-3", usage=Amounts(tokens=5, cost_nanos=10**9))
    await budget.consume("cli", usage=Amounts(tool_calls=2))
    today = datetime.now(UTC).date()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ration_server.entry",
        "report",
        "--budget",
        budget_address,
        "--from",
        (today - timedelta(days=1)).isoformat(),
        "--to",
        (today + timedelta(days=2)).isoformat(),
        "--group-by",
        "model",
        "--agent",
        "booker",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    lines = out.decode().splitlines()
    assert lines[0].startswith(f"spend from {today - timedelta(days=1)}T00:00:00+00:00")
    assert lines[1].split() == [
        "model",
        "cost",
        "(USD)",
        "tokens",
        "tool",
        "calls",
        "retries",
        "calls",
    ]
    assert [line.split() for line in lines[2:]] == [
        ['""', "0.000000000", "0", "2", "0", "1"],
        ["claude-3", "1.000000000", "5", "0", "0", "1"],
        ["gpt-4o", "0.003500000", "2,000", "0", "0", "2"],
        ["total", "1.003500000", "2,005", "2", "0", "4"],
    ]


async def test_ration_report_names_a_refusal_and_exits_1(shared_servers: SharedServers) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ration_server.entry",
        "report",
        "--budget",
        shared_servers.address("budget"),
        "--from",
        "2024-01-01",
        "--to",
        "2025-06-01",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 1
    assert "VALIDATION_FAILED" in err.decode()
    assert "end_time" in err.decode()
