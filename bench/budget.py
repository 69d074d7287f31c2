"""Budget scenarios: runs opened beforehand, Reserve+Consume pairs (spread or hot), Check,
ReportSpend."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from bench.caller import Caller, Op, auth, unary
from ration.budget.v1 import budget_pb2 as pb

SERVICE = "/ration.budget.v1.BudgetService/"
MODEL = "gpt-4o-mini"
HOT_RUN = "bench-hot"
# Callers in flight of the second spread figure and of the echo ceiling it is compared with:
# with fewer callers than the default 64, fewer calls wait to share a batch.
FEW_CALLERS = 16
# Large enough that nothing is ever refused during a bench run.
POLICY = pb.BudgetPolicy(max_tokens=10**15, max_cost_nanos=10**18)
ESTIMATE = pb.Amounts(tokens=1_000, cost_nanos=2_000_000)
USAGE = pb.Amounts(tokens=800, cost_nanos=1_600_000)


# A year of spend, read one group a page: each page aggregates the whole window today.
REPORT_DAYS = 365
REPORT_GROUPS = (pb.SPEND_GROUP_BY_MODEL, pb.SPEND_GROUP_BY_HOUR)


def run_id(index: int, prefix: str = "bench-run") -> str:
    return f"{prefix}-{index:05d}"


async def open_runs(
    target: str, run_ids: Sequence[str], concurrency: int = 32, tenant: str | None = None
) -> None:
    """OpenRun for every id with large limits (idempotent per run id; errors propagate), as
    `tenant` (bench/tenants.py) when the server has tokens."""
    metadata = auth({"tenant": tenant})
    async with grpc.aio.insecure_channel(target) as channel:
        open_run = unary(channel, SERVICE + "OpenRun", pb.OpenRunResponse)
        gate = asyncio.Semaphore(concurrency)

        async def one(rid: str) -> None:
            request = pb.OpenRunRequest(
                request_id=uuid.uuid4().hex,
                run_id=rid,
                project_id="bench-project",
                workflow_id="bench-workflow",
                agent_id="bench-agent",
                policy=POLICY,
            )
            async with gate:
                await open_run(request, timeout=30, metadata=metadata)

        await asyncio.gather(*(one(rid) for rid in run_ids))


def _runs(params: Mapping[str, Any], index: int) -> tuple[random.Random, int, bool]:
    return random.Random(index), int(params.get("runs", 1_000)), bool(params.get("hot", False))


def pair_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """Reserve then Consume that hold: on a random run of `runs` (named `prefix`-N), or on the
    hot run; as `tenant` when given."""
    channel = channels[index % len(channels)]
    reserve = unary(channel, SERVICE + "Reserve", pb.ReserveResponse)
    consume = unary(channel, SERVICE + "Consume", pb.ConsumeResponse)
    rng, runs, hot = _runs(params, index)
    prefix, metadata = str(params.get("prefix", "bench-run")), auth(params)

    async def op(caller: Caller) -> None:
        rid = HOT_RUN if hot else run_id(rng.randrange(runs), prefix)
        held = await caller.rpc(
            "Reserve",
            reserve(
                pb.ReserveRequest(
                    request_id=uuid.uuid4().hex,
                    run_id=rid,
                    model=MODEL,
                    estimate=ESTIMATE,
                    ttl_seconds=60,
                    mode=pb.RESERVE_MODE_ALL_OR_NOTHING,
                ),
                timeout=caller.timeout,
                metadata=metadata,
            ),
        )
        await caller.rpc(
            "Consume",
            consume(
                pb.ConsumeRequest(
                    request_id=uuid.uuid4().hex,
                    run_id=rid,
                    reservation_id=held.reservation.reservation_id,
                    model=MODEL,
                    usage=USAGE,
                ),
                timeout=caller.timeout,
                metadata=metadata,
            ),
        )

    return op


def check_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """Check an estimate and model on a random run of `runs` (no side effects)."""
    check = unary(channels[index % len(channels)], SERVICE + "Check", pb.CheckResponse)
    rng, runs, _ = _runs(params, index)

    async def op(caller: Caller) -> None:
        request = pb.CheckRequest(
            run_id=run_id(rng.randrange(runs)), estimate=ESTIMATE, model=MODEL
        )
        await caller.rpc("Check", check(request, timeout=caller.timeout))

    return op


def report_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """The first page (one group) of a year's spend by model or by hour (alternating callers),
    as `tenant` when given."""
    report = unary(channels[index % len(channels)], SERVICE + "ReportSpend", pb.ReportSpendResponse)
    metadata = auth(params)
    group_by = REPORT_GROUPS[index % len(REPORT_GROUPS)]

    async def op(caller: Caller) -> None:
        now = time.time()
        start, end = Timestamp(), Timestamp()
        start.FromSeconds(int(now) - REPORT_DAYS * 86_400)
        end.FromSeconds(int(now) + 3_600)
        request = pb.ReportSpendRequest(
            start_time=start, end_time=end, group_by=group_by, page_size=1
        )
        await caller.rpc("ReportSpend", report(request, timeout=caller.timeout, metadata=metadata))

    return op
