"""Runs stored under the first (repr) OpenRun fingerprint still re-open as the same call."""

from __future__ import annotations

import asyncpg
import grpc

from budget_service.api import requests as convert
from budget_service.domain.commands import OpenRun
from budget_service.domain.fingerprints import legacy_open_run_fingerprint, open_run_fingerprint
from ration.budget.v1 import budget_pb2 as pb
from tests.support.budget import Budget, new_id, policy
from tests.support.errors import rpc_error


def command_of(run_id: str, **fields: int) -> OpenRun:
    request = pb.OpenRunRequest(
        request_id=new_id(), run_id=run_id, project_id="proj", policy=policy(**fields)
    )
    return convert.open_run(request)[1]


async def test_a_run_stored_with_the_repr_fingerprint_reopens_as_the_same_call(
    budget_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    budget = Budget(budget_channel)
    await budget.open_run("legacy", max_tokens=10)
    command = command_of("legacy", max_tokens=10)
    stored = await db.fetchval("SELECT open_fingerprint FROM budget.runs WHERE run_id = 'legacy'")
    assert bytes(stored) == open_run_fingerprint(command)
    legacy = legacy_open_run_fingerprint(command)
    await db.execute("UPDATE budget.runs SET open_fingerprint = $1 WHERE run_id = 'legacy'", legacy)
    again = await budget.open_run("legacy", max_tokens=10)
    assert (again.run_id, again.effective_budget.max_tokens) == ("legacy", 10)
    other = await rpc_error(budget.open_run("legacy", max_tokens=11))
    assert (other.code, other.reason) == (grpc.StatusCode.ALREADY_EXISTS, "RUN_EXISTS")
