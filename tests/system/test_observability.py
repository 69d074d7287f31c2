"""Every dashboard panel and alert rule, evaluated by a real Prometheus scraping both services.

Both services run as subprocesses (`ration budget serve`, `ration memory serve`) on one migrated
database, with `ration notify` delivering the tenant's alerts to a receiver on loopback;
Prometheus (Debian's `prometheus` package) runs with the shipped scrape config, pointed at their
metrics ports with a 1 s interval, and loads the shipped alert rules. Traffic through the
real gRPC APIs exercises every metric, twice, with a scrape in between, so that counters have
increased inside every rate window and histograms have observations to take quantiles of.

Each query is then asked of Prometheus's query API: it must parse, and it must return at least
one series. Dashboard variables take their "All" values ($job, $instance, $project → `.*`),
`$__rate_interval` is 1m and `$__range` 1h. An alert expression is `<measure> <comparison>
<threshold>` (tests/unit/test_deploy_prometheus.py enforces the shape); the test evaluates the
whole expression for parsing and the measure for data, since a healthy stack should not fire.

A query whose metrics come from an RPC the server still answers UNIMPLEMENTED is skipped, naming
the RPC, so these tests turn green by themselves as the RPCs land. Without the prometheus binary
the module is skipped, except under CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import copy
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import pytest
import yaml

from budget_service.api.servicer import BudgetServicer
from memory_service.api.servicer import MemoryServicer
from ration.budget.v1 import budget_pb2 as b
from ration.budget.v1 import budget_service_pb2, budget_service_pb2_grpc
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as ms
from ration.memory.v1 import memory_service_pb2_grpc
from tests.support.postgres import with_database
from tests.support.procs import BIN, ROOT, Proc, clean_env
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.system

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$job": ".*",
    "$instance": ".*",
    "$project": ".*",
}
COMPARISON = re.compile(
    r"^(?P<measure>.*\S)\s*(?:>|<|>=|<=|==|!=)\s*(?:bool\s+)?[0-9.e+-]+\s*$", re.S
)
METRIC = re.compile(r"\b((?:grpc_server|ration)_[a-z0-9_]+)\b")
# Which traffic scenario makes a metric appear; first match wins. Metrics not listed (the gRPC
# server metrics, the Postgres pool) come from any call and must always have data.
SCENARIO_OF_METRIC = (
    ("ration_budget_advisory_refusals_total", "budget-advisory"),
    ("ration_budget_holds_expired_total", "budget-expiry"),
    ("ration_budget_", "budget-spend"),
    ("grpc_server_msg_sent_total", "budget-stream"),
    ("ration_memory_capacity_refusals_total", "memory-capacity"),
    ("ration_memory_list_", "memory-list"),
    ("ration_memory_", "memory-writes"),
)
NANOS = 1_000_000_000
# The jobs Prometheus scrapes: both services and `ration notify`.
SCRAPED = ("budget", "memory", "notify")
# Each dashboard's own service, the Prometheus job it is scraped as, and its RPC names.
OWN_SERVICE = {
    "budget": budget_service_pb2.DESCRIPTOR.services_by_name["BudgetService"],
    "memory": ms.DESCRIPTOR.services_by_name["MemoryService"],
}
# Identifiers the traffic below chooses as a tenant would (the tenant itself is `dev`).
TENANT_IDENTIFIERS = ("proj-pooled", "proj-advisory", "wf-observability", "agent-observability")
MODEL = "gpt-4o-mini"
OK = grpc.StatusCode.OK


# ---- the queries ---------------------------------------------------------------------------------


def grafana_to_promql(expr: str) -> str:
    label_values = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr.strip(), re.S)
    if label_values:
        expr = label_values[1]
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return expr


def queries() -> list[tuple[str, str, str]]:
    """(where, expression to parse, expression that must return data)."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        nested = [inner for panel in board["panels"] for inner in panel.get("panels", [])]
        for panel in board["panels"] + nested:
            for target in panel.get("targets", []):
                expr = grafana_to_promql(target["expr"])
                found.append((f"{path.stem}: {panel['title']} [{target['refId']}]", expr, expr))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                expr = grafana_to_promql(variable["query"]["query"])
                found.append((f"{path.stem}: variable {variable['name']}", expr, expr))
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            expr = rule["expr"].strip()
            match = COMPARISON.match(expr)
            assert match, f"{rule['alert']}: not `<measure> <comparison> <threshold>`"
            measure = match["measure"]
            # absent(x) has data only while the alert fires: what must return data is x, the
            # targets it watches.
            absent = re.fullmatch(r"absent\((.*)\)", measure.strip(), re.S)
            found.append((f"alert {rule['alert']}", expr, absent[1] if absent else measure))
    return found


def rpc_queries() -> list[tuple[str, str, str]]:
    """(where, own dashboard, expression) of every dashboard target on the gRPC metrics."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        nested = [inner for panel in board["panels"] for inner in panel.get("panels", [])]
        for panel in board["panels"] + nested:
            for target in panel.get("targets", []):
                if "grpc_server_" in target["expr"]:
                    where = f"{path.stem}: {panel['title']} [{target['refId']}]"
                    found.append((where, path.stem, grafana_to_promql(target["expr"])))
    return found


# ---- traffic -------------------------------------------------------------------------------------


class NotServed(Exception):
    """The RPC is not built yet: the server answers with the generated UNIMPLEMENTED stub."""


@dataclass
class Traffic:
    """Outcome per scenario: absent = ran; otherwise why its metrics cannot be expected."""

    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @contextlib.contextmanager
    def scenario(self, name: str) -> Iterator[None]:
        try:
            yield
        except NotServed as error:
            self.skipped.setdefault(name, f"{name} traffic needs {error}, which is UNIMPLEMENTED")
        except (grpc.RpcError, AssertionError) as error:
            self.failed.setdefault(name, f"{name} traffic failed: {error!r}")


def built(servicer: type, method: str) -> bool:
    """Whether the service's servicer overrides the generated UNIMPLEMENTED stub of `method`."""
    base = next(
        c for c in servicer.__mro__ if c.__module__.endswith("_pb2_grpc") and hasattr(c, method)
    )
    return getattr(servicer, method) is not getattr(base, method)


def caller(stub: Any, servicer: type) -> Callable[..., Any]:
    def call(method: str, request: Any, expect: grpc.StatusCode = OK) -> Any:
        try:
            reply = getattr(stub, method)(request, timeout=15)
        except grpc.RpcError as error:
            # The generated stub of an RPC not built yet answers UNIMPLEMENTED (INTERNAL once the
            # error interceptor has mapped its NotImplementedError).
            if error.code() == grpc.StatusCode.UNIMPLEMENTED or not built(servicer, method):
                raise NotServed(method) from None
            if error.code() == expect:
                return None
            raise AssertionError(f"{method}: {error.code().name} {error.details()}") from None
        assert expect == OK, f"{method} answered OK where {expect.name} was expected"
        return reply

    return call


def budget_traffic(address: str, tag: str, traffic: Traffic) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = budget_service_pb2_grpc.BudgetServiceStub(channel)  # type: ignore[no-untyped-call]
        call = caller(stub, BudgetServicer)
        call("GetCapabilities", b.GetCapabilitiesRequest())

        def open_run(run: str, project: str, policy: b.BudgetPolicy) -> None:
            call(
                "OpenRun",
                b.OpenRunRequest(
                    request_id=f"open-{run}",
                    run_id=run,
                    project_id=project,
                    workflow_id="wf-observability",
                    agent_id="agent-observability",
                    policy=policy,
                ),
            )

        def reserve(run: str, step: str, expect: grpc.StatusCode = OK, **estimate: int) -> Any:
            return call(
                "Reserve",
                b.ReserveRequest(
                    request_id=f"{step}-{run}",
                    run_id=run,
                    model=MODEL,
                    estimate=b.Amounts(**estimate),
                ),
                expect,
            )

        def consume(run: str, step: str, reservation: str = "", **usage: int) -> None:
            call(
                "Consume",
                b.ConsumeRequest(
                    request_id=f"{step}-{run}",
                    run_id=run,
                    reservation_id=reservation,
                    model=MODEL,
                    usage=b.Amounts(**usage),
                ),
            )

        def release(run: str, step: str, reservation: str) -> None:
            call(
                "Release",
                b.ReleaseRequest(
                    request_id=f"{step}-{run}", run_id=run, reservation_id=reservation
                ),
            )

        with traffic.scenario("budget-spend"):
            call(
                "PutScopeBudget",
                b.PutScopeBudgetRequest(
                    request_id=f"pool-{tag}",
                    budget=b.ScopeBudget(
                        scope=b.SCOPE_PROJECT,
                        scope_id="proj-pooled",
                        kind=b.SCOPE_BUDGET_KIND_POOLED,
                        policy=b.BudgetPolicy(
                            max_tokens=1_000_000,
                            max_cost_nanos=100 * NANOS,
                            max_tool_calls=1_000,
                            max_retries=1_000,
                        ),
                        window=b.WINDOW_NONE,
                        enforcement=b.ENFORCEMENT_HARD,
                        max_model_calls=1_000,  # the model-call pool gauges have data too
                    ),
                ),
            )
            run = f"run-spend-{tag}"
            open_run(
                run,
                "proj-pooled",
                b.BudgetPolicy(
                    max_tokens=1000,
                    max_cost_nanos=NANOS,
                    max_tool_calls=5,
                    max_retries=3,
                    threshold_percent=50,
                    on_exhaustion=b.ON_EXHAUSTION_FAIL,
                ),
            )
            reservation = reserve(run, "r1", tokens=400, cost_nanos=NANOS * 4 // 10)
            # 600 tokens on a 400-token hold: an overrun, and past the 50% threshold.
            consume(
                run,
                "c1",
                reservation.reservation.reservation_id,
                tokens=600,
                cost_nanos=NANOS * 6 // 10,
            )
            tool = reserve(run, "r2", tool_calls=1)
            release(run, "x2", tool.reservation.reservation_id)
            consume(run, "c2", tool_calls=1, retries=1)
            call("Check", b.CheckRequest(run_id=run, estimate=b.Amounts(tokens=10), model=MODEL))
            held = reserve(run, "r3", tokens=300)
            # 600 consumed + 300 held + 200 > 1000 but 600 + 200 fits: contention, BUDGET_HELD.
            reserve(run, "r4", grpc.StatusCode.RESOURCE_EXHAUSTED, tokens=200)
            release(run, "x3", held.reservation.reservation_id)
            # 600 + 500 > 1000: a breach; the run fails (BUDGET_EXHAUSTED).
            reserve(run, "r5", grpc.StatusCode.RESOURCE_EXHAUSTED, tokens=500)
            call("GetRun", b.GetRunRequest(run_id=f"missing-{tag}"), grpc.StatusCode.NOT_FOUND)

        with traffic.scenario("budget-advisory"):
            call(
                "PutScopeBudget",
                b.PutScopeBudgetRequest(
                    request_id=f"advisory-{tag}",
                    budget=b.ScopeBudget(
                        scope=b.SCOPE_PROJECT,
                        scope_id="proj-advisory",
                        kind=b.SCOPE_BUDGET_KIND_PER_RUN_CAP,
                        policy=b.BudgetPolicy(max_tokens=100),
                        enforcement=b.ENFORCEMENT_ADVISORY,
                    ),
                ),
            )
            run = f"run-advisory-{tag}"
            open_run(run, "proj-advisory", b.BudgetPolicy())
            reservation = reserve(run, "r1", tokens=500)
            assert reservation.advisory_refusal_reason, "advisory mode reports the would-be refusal"
            consume(run, "c1", reservation.reservation.reservation_id, tokens=500)
            call(
                "CloseRun",
                b.CloseRunRequest(
                    request_id=f"close-{run}", run_id=run, outcome=b.RUN_OUTCOME_SUCCEEDED
                ),
            )

        with traffic.scenario("budget-expiry"):
            run = f"run-expiry-{tag}"
            open_run(run, "proj-expiry", b.BudgetPolicy(max_tokens=1000))
            # Never consumed: the sweeper expires it a second later.
            call(
                "Reserve",
                b.ReserveRequest(
                    request_id=f"r1-{run}",
                    run_id=run,
                    model=MODEL,
                    estimate=b.Amounts(tokens=10),
                    ttl_seconds=1,
                ),
            )

        with traffic.scenario("budget-stream"):
            run = f"run-stream-{tag}"
            open_run(run, "proj-stream", b.BudgetPolicy(max_tokens=1000))
            stream = stub.WatchRunEvents(b.WatchRunEventsRequest(run_id=run), timeout=15)
            try:
                first = next(stream)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED or not built(
                    BudgetServicer, "WatchRunEvents"
                ):
                    raise NotServed("WatchRunEvents") from None
                raise AssertionError(f"WatchRunEvents: {error.code().name}") from None
            finally:
                stream.cancel()
            assert first.event.type == "budget.reserved"


def memory_traffic(address: str, tag: str, traffic: Traffic) -> None:
    with grpc.insecure_channel(address) as channel:
        call = caller(memory_service_pb2_grpc.MemoryServiceStub(channel), MemoryServicer)  # type: ignore[no-untyped-call]
        call("GetCapabilities", ms.GetCapabilitiesRequest())

        def append(
            ref: str, contents: list[str], expect: grpc.StatusCode = OK, **extra: Any
        ) -> Any:
            return call(
                "AppendEntries",
                ms.AppendEntriesRequest(
                    request_id=f"append-{ref}",
                    memory_ref=ref,
                    entries=[m.EntryInput(kind="fact", content=text) for text in contents],
                    **extra,
                ),
                expect,
            )

        with traffic.scenario("memory-writes"):
            ref = f"obs/notes-{tag}"
            reply = append(
                ref,
                [
                    "the deploy key is sk-proj1234567890abcdefghijklmnop for the staging bot",
                    "aws access key AKIAIOSFODNN7EXAMPLE belongs to the ci user",
                    "the database password is hunter2-hunter2, rotate it monthly",
                    "the user prefers metric units",
                    "standup is at 09:30 UTC",
                ],
                secrets=[m.Secret(secret_id="db-password", value="hunter2-hunter2")],
            )
            ids = [entry.entry_id for entry in reply.entries]
            call(
                "ForgetEntries",
                ms.ForgetEntriesRequest(
                    request_id=f"forget-{ref}", memory_ref=ref, entry_ids=ids[:2], reason="stale"
                ),
            )
            preview = call(
                "CompactMemory",
                ms.CompactMemoryRequest(request_id=f"dry-{ref}", memory_ref=ref, dry_run=True),
            )
            call(
                "CompactMemory",
                ms.CompactMemoryRequest(
                    request_id=f"compact-{ref}",
                    memory_ref=ref,
                    expected_revision=preview.revision,
                    reason="observability test",
                ),
            )
            call("GetCapacity", ms.GetCapacityRequest(memory_ref=ref))
            append(f"obs/bad-{tag}", [], grpc.StatusCode.INVALID_ARGUMENT)

        with traffic.scenario("memory-capacity"):
            # One more than RATION_MEMORY_MAX_ACTIVE_ENTRIES below.
            append(
                f"obs/full-{tag}",
                [f"note {i}" for i in range(21)],
                grpc.StatusCode.FAILED_PRECONDITION,
            )

        with traffic.scenario("memory-list"):
            ref = f"obs/list-{tag}"
            long_text = " ".join(
                f"observation {i} about the deployment pipeline" for i in range(12)
            )
            append(ref, [long_text, long_text + " again", "short and newest"])
            for request in (
                ms.ListMemoryRequest(memory_ref=ref, token_budget=20),  # stopped by the budget
                ms.ListMemoryRequest(memory_ref=ref, limit=1),  # stopped by the limit
                ms.ListMemoryRequest(
                    memory_ref=ref,
                    token_budget=100_000,
                    token_counter=m.TOKEN_COUNTER_CHARS,
                ),
            ):
                call("ListMemory", request)


# ---- the stack -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


@dataclass
class Stack:
    prometheus: str
    addresses: dict[str, str]
    traffic: Traffic

    def api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.prometheus}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                document: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as error:
            document = json.load(error)
        return document

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.2)


def prometheus_config(metrics: dict[str, str]) -> dict[str, Any]:
    """The shipped scrape config, pointed at the test's services, scraping every second."""
    config = copy.deepcopy(yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text()))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / rule) for rule in config["rule_files"]]
    jobs = [job for job in config["scrape_configs"] if job["job_name"] in metrics]
    assert {job["job_name"] for job in jobs} == set(metrics), "a service is not scraped"
    for job in jobs:
        job["static_configs"] = [{"targets": [metrics[job["job_name"]]]}]
    config["scrape_configs"] = jobs
    return config


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is missing under CI: install Debian's `prometheus` package")
        pytest.skip("prometheus not installed (apt-get install prometheus); runs under CI")
    return path


@pytest.fixture(scope="module")
def stack_database(pg_server_url: str, template_database: str) -> Iterator[str]:
    name = f"ration_obs_{uuid.uuid4().hex[:12]}"

    async def admin(statement: str) -> None:
        conn = await asyncpg.connect(pg_server_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"'))
    try:
        yield with_database(pg_server_url, name)
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def stack(
    prometheus_binary: str, stack_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("observability")
    env = clean_env(
        DATABASE_URL=stack_database,
        RATION_LOG_LEVEL="WARNING",
        RATION_SWEEP_INTERVAL_MS="100",
        RATION_GAUGE_INTERVAL_MS="100",
        RATION_MEMORY_MAX_ACTIVE_ENTRIES="20",
        RATION_MEMORY_MAX_MANIFEST_ENTRIES="40",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
    )
    services = {
        name: Proc.start([str(BIN / "ration"), name, "serve"], env) for name in ("budget", "memory")
    }
    # `ration notify` beside them, delivering the development tenant's alerts to a receiver.
    receiver = Receiver().__enter__()
    hooks = tmp / "webhooks.json"
    row = {"id": "observability", "tenant": "dev", "url": receiver.url(), "secret": "s"}
    hooks.write_text(json.dumps({"webhooks": [row]}))
    notify_env = env | {
        "RATION_NOTIFY_WEBHOOKS_FILE": str(hooks),
        "RATION_NOTIFY_LISTEN": "127.0.0.1:0",
        "RATION_NOTIFY_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_NOTIFY_POLL_MS": "100",
    }
    services["notify"] = Proc.start([str(BIN / "ration"), "notify"], notify_env)
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        for name, proc in services.items():
            proc.wait_for("notify: " if name == "notify" else "ready:")
        words = services["notify"].lines[-1].split()
        services["notify"].metrics["notify"] = words[words.index("metrics") + 1]
        addresses = {name: services[name].addresses[name] for name in ("budget", "memory")}
        metrics = {name: host_port(proc.metrics[name]) for name, proc in services.items()}
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(metrics)))
        port = free_port()
        with (tmp / "prometheus.log").open("wb") as log:
            prometheus = subprocess.Popen(
                [
                    prometheus_binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        stack = Stack(f"http://127.0.0.1:{port}", addresses, Traffic())

        def ready() -> bool:
            assert prometheus is not None
            assert prometheus.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{stack.prometheus}/-/ready", timeout=2) as response,
            ):
                return bool(response.status == 200)
            return False

        stack.wait("prometheus to start", ready)
        for round_tag in ("a", "b"):
            started = time.time()
            budget_traffic(addresses["budget"], round_tag, stack.traffic)
            memory_traffic(addresses["memory"], round_tag, stack.traffic)
            stack.wait(
                "a scrape of both services after the traffic",
                functools.partial(scraped_after, stack, started),
            )
        yield stack
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        for proc in services.values():
            proc.stop()
        receiver.__exit__(None, None, None)


def scraped_after(stack: Stack, started: float) -> bool:
    targets = stack.api("targets")["data"]["activeTargets"]
    if len(targets) != len(SCRAPED):
        return False
    for target in targets:
        last = target.get("lastScrape", "")
        if target["health"] != "up" or not last or last.startswith("0001"):
            return False
        stamp = calendar.timegm(time.strptime(last[:19], "%Y-%m-%dT%H:%M:%S"))  # UTC, whole s
        if stamp <= started:
            return False
    return True


# ---- the tests -----------------------------------------------------------------------------------


def test_prometheus_scrapes_both_services_and_notify(stack: Stack) -> None:
    targets = stack.api("targets")["data"]["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == dict.fromkeys(SCRAPED, "up")


def test_prometheus_loads_and_evaluates_every_alert_rule(stack: Stack) -> None:
    shipped = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    expected = {rule["alert"] for group in shipped["groups"] for rule in group["rules"]}

    def evaluated() -> bool:
        groups = stack.api("rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return {r["name"] for r in rules} == expected and all(r["health"] == "ok" for r in rules)

    stack.wait("every rule to be evaluated without error", evaluated)


@pytest.mark.parametrize("name", ["budget", "memory"])
def test_the_compose_healthcheck_reports_serving(stack: Stack, name: str) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"][name]["healthcheck"]["test"]
    assert command[:3] == ["CMD", "python", "-c"]
    port = stack.addresses[name].rsplit(":", 1)[1]
    code = re.sub(r"'127\.0\.0\.1:\d+'", f"'127.0.0.1:{port}'", command[3])
    result = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("where", "expr", "measure"), queries(), ids=[q[0] for q in queries()])
def test_query_parses_and_returns_data(stack: Stack, where: str, expr: str, measure: str) -> None:
    parsed = stack.query(expr)
    assert parsed["status"] == "success", f"{where}: {parsed.get('error')}"
    found = {
        next((s for prefix, s in SCENARIO_OF_METRIC if metric.startswith(prefix)), None)
        for metric in METRIC.findall(measure)
    }
    scenarios = sorted(s for s in found if s is not None)
    for scenario in scenarios:
        if scenario in stack.traffic.failed:
            pytest.fail(stack.traffic.failed[scenario])
    skipped = [stack.traffic.skipped[s] for s in scenarios if s in stack.traffic.skipped]
    if skipped:
        pytest.skip("; ".join(skipped))
    last: dict[str, Any] = {}

    def has_data() -> bool:
        nonlocal last
        last = stack.query(measure)
        return last["status"] == "success" and bool(last["data"]["result"])

    try:
        stack.wait(f"{where} to return data", has_data, timeout=30)
    except AssertionError:
        pytest.fail(f"{where}: no data for {measure!r}; last answer {last}")


@pytest.mark.parametrize(
    ("where", "board", "expr"), rpc_queries(), ids=[q[0] for q in rpc_queries()]
)
def test_rpc_panels_show_only_their_own_service(
    stack: Stack, where: str, board: str, expr: str
) -> None:
    """Both services answer calls in this stack, so a panel that selected every ration service
    would return the other one's methods and job too."""
    service = OWN_SERVICE[board]
    methods = {method.name for method in service.methods}
    result: list[dict[str, Any]] = []

    def has_data() -> bool:
        nonlocal result
        answer = stack.query(expr)
        result = answer["data"]["result"] if answer["status"] == "success" else []
        return bool(result)

    stack.wait(f"{where} to return data", has_data, timeout=30)
    for series in result:
        labels = series["metric"]
        assert labels.get("job", board) == board, f"{where}: shows job {labels['job']}"
        assert labels.get("grpc_method", "") in methods | {""}, (
            f"{where}: shows {labels['grpc_method']}, not a method of {service.full_name}"
        )


def test_no_series_names_a_tenant_identifier_by_default(stack: Stack) -> None:
    for label in ("tenant", "project", "scope_id", "workflow", "agent", "run_id"):
        answer = stack.query(f'{{__name__=~"ration_.+|grpc_.+", {label}!=""}}')
        assert answer["status"] == "success"
        assert answer["data"]["result"] == [], f"series labelled {label}"
    values = json.dumps(stack.query('{__name__=~"ration_.+|grpc_.+"}')["data"]["result"])
    assert "ration_budget_pool_remaining_tokens" in values, "the control: pool gauges are there"
    for identifier in TENANT_IDENTIFIERS:
        assert identifier not in values, identifier
