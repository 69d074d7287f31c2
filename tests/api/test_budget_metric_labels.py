"""A real budget server's /metrics: bounded model labels, no tenant identifiers unless opted in."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import USD, Budget
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

ADMIN = (("authorization", "Bearer admin-of-acme"),)
# Identifiers a tenant chooses; none may show on an unauthenticated /metrics by default.
TENANT = "tenant-acme-7f3"
PROJECT = "proj-acme-7f3"
POOL = "pool-acme-7f3"
WORKFLOW = "wf-acme-7f3"
AGENT = "agent-acme-7f3"
RUN = "run-acme-7f3"


async def scrape(port: int) -> str:
    def read() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    return await asyncio.to_thread(read)


def series_by_metric(text: str, label: str) -> dict[str, int]:
    """Number of series of each metric family that carries `label`."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        labelled = {tuple(sorted(s.labels.items())) for s in family.samples if label in s.labels}
        if labelled:
            counts[family.name] = len(labelled)
    return counts


async def test_three_thousand_models_stay_within_the_model_bound(
    start_server: StartServer,
) -> None:
    runner = await start_server("budget")  # RATION_METRICS_MAX_MODELS: the default, 50
    runs = [f"models-{i}" for i in range(30)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel)
        await asyncio.gather(*(budget.open_run(run) for run in runs))

        async def consume_all(index: int, run: str) -> None:
            for k in range(100):
                await budget.consume(run, model=f"model-{index}-{k:03d}", tokens=1, cost_nanos=1)

        await asyncio.gather(*(consume_all(i, run) for i, run in enumerate(runs)))
    text = await scrape(runner.metrics_port)
    counts = series_by_metric(text, "model")
    assert set(counts) == {"ration_budget_consumed_tokens", "ration_budget_consumed_cost_usd"}
    assert all(count <= 51 for count in counts.values()), counts
    families = {f.name: f for f in text_string_to_metric_families(text)}
    tokens = families["ration_budget_consumed_tokens"].samples
    assert sum(s.value for s in tokens) == 3000, "usage beyond the bound is counted as other"
    assert {s.labels["model"] for s in tokens if s.labels["model"] == "other"} == {"other"}
    assert len(text) < 100_000


def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json", ("admin-of-acme", TENANT, ["admin", "writer", "reader"])
    )


async def pooled_traffic(start_server: StartServer, tmp_path: Path, **env: str) -> str:
    """A pooled project budget, a run under it that spends, and /metrics after a sweep."""
    runner = await start_server(
        "budget", RATION_TOKEN_FILE=str(token_file(tmp_path)), RATION_SWEEP_INTERVAL_MS="50", **env
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        budget = Budget(channel, ADMIN)
        await budget.put_scope(
            pb.SCOPE_PROJECT,
            POOL,
            kind=pb.SCOPE_BUDGET_KIND_POOLED,
            max_tokens=10_000,
            max_cost_nanos=10 * USD,
        )
        await budget.open_run(
            RUN, project_id=POOL, workflow_id=WORKFLOW, agent_id=AGENT, max_tokens=5000
        )
        await budget.open_run(f"{RUN}-2", project_id=PROJECT)
        reservation = await budget.reserve(RUN, tokens=100)
        await budget.consume(
            RUN, reservation.reservation.reservation_id, tokens=100, cost_nanos=USD
        )
        await budget.consume(f"{RUN}-2", tokens=5)
        await asyncio.sleep(0.3)  # a few sweeps: the pool gauges are refreshed
    return await scrape(runner.metrics_port)


async def test_metrics_name_no_tenant_project_or_pool_by_default(
    start_server: StartServer, tmp_path: Path
) -> None:
    text = await pooled_traffic(start_server, tmp_path)
    assert 'ration_budget_pool_remaining_tokens{rank="1",scope="project"} 9900.0' in text
    assert 'ration_budget_pool_limit_usd{rank="1",scope="project"} 10.0' in text
    assert 'ration_budget_consumed_tokens_total{model="gpt-4o"} 105.0' in text
    for private in (TENANT, PROJECT, POOL, WORKFLOW, AGENT, RUN, "tenant=", "project=", "res_"):
        assert private not in text, private


async def test_tenant_labels_appear_only_when_the_operator_opts_in(
    start_server: StartServer, tmp_path: Path
) -> None:
    text = await pooled_traffic(start_server, tmp_path, RATION_METRICS_TENANT_LABELS="true")
    assert (
        'ration_budget_pool_remaining_tokens{rank="1",scope="project",'
        f'scope_id="{POOL}",tenant="{TENANT}"}} 9900.0'
    ) in text
    assert (
        f'ration_budget_consumed_tokens_total{{model="gpt-4o",project="{PROJECT}",'
        f'tenant="{TENANT}"}} 5.0'
    ) in text
    for never in (WORKFLOW, AGENT, RUN, "res_"):  # run-level ids are never labels
        assert never not in text, never
