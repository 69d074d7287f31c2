"""ration_client against real servers: retries, typed errors, holds that never leak."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from ration_client import (
    Amounts,
    BudgetClient,
    BudgetExhausted,
    BudgetHeld,
    BudgetPolicy,
    CapacityExceeded,
    Dimension,
    InvalidRequest,
    MemoryClient,
    ModelDenied,
    ModelPatterns,
    NotFound,
    RunExists,
    StoreBusy,
    Unavailable,
    usd,
)
from ration_client import errors as client_errors
from tests.support.ids import new_id
from tests.support.servers import SharedServers, StartServer


class LoseFirstResponse(grpc.aio.UnaryUnaryClientInterceptor):
    """Lets the first call of `method` reach the server, then reports UNAVAILABLE to the caller:
    the effect happened but the response was lost, as when a connection drops."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.dropped = 0
        self.request_ids: list[str] = []

    async def intercept_unary_unary(
        self, continuation: Any, details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith(self.method):
            self.request_ids.append(request.request_id)
            if not self.dropped:
                await call  # the server applied it
                self.dropped += 1
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    "connection lost (injected)",
                )
        return call


@pytest.fixture
def shared_budget_address(shared_servers: SharedServers) -> str:
    """The module's budget server: its tests keep to fresh run ids."""
    return shared_servers.address("budget")


async def test_retry_after_unavailable_reuses_the_request_id_and_counts_once(
    shared_budget_address: str, shared_db: asyncpg.Connection
) -> None:
    run_id = new_id("r1")
    lose = LoseFirstResponse("/Consume")
    async with BudgetClient(shared_budget_address, interceptors=[lose]) as budget:
        await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=1000))
        async with budget.call(run_id, model="gpt-4o", estimate=Amounts(tokens=100)) as reservation:
            await reservation.consume(Amounts(tokens=80))
        run = await budget.get_run(run_id)
    assert lose.dropped == 1
    assert len(lose.request_ids) == 2
    assert lose.request_ids[0] == lose.request_ids[1]
    tokens = run.status(Dimension.TOKENS)
    assert (tokens.consumed, tokens.held) == (80, 0)
    consumes = await shared_db.fetchval(
        "SELECT count(*) FROM budget.ledger WHERE run_id = $1 AND decision = 'consume'", run_id
    )
    assert consumes == 1


async def test_documented_refusals_raise_their_typed_exceptions(shared_budget_address: str) -> None:
    run_id = new_id("r2")
    async with BudgetClient(shared_budget_address) as budget:
        with pytest.raises(NotFound) as missing:
            await budget.get_run("nope")
        assert missing.value.reason == "RUN_NOT_FOUND"
        policy = BudgetPolicy(
            max_cost_nanos=usd("1.00"),
            max_tokens=100,
            model_allow=ModelPatterns(patterns=["claude-*"]),
        )
        await budget.open_run(run_id, project_id="p", policy=policy)
        with pytest.raises(RunExists):
            await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=5))
        with pytest.raises(ModelDenied) as denied:
            await budget.reserve(run_id, model="gpt-4o", estimate=Amounts(tokens=1))
        assert (denied.value.model, denied.value.scope) == ("gpt-4o", "run")
        with pytest.raises(InvalidRequest) as invalid:
            await budget.reserve(run_id, model="claude-3", estimate=Amounts(tokens=-5))
        assert any(field.startswith("estimate") for field, _ in invalid.value.violations)
        first = await budget.reserve(run_id, model="claude-3", estimate=Amounts(tokens=60))
        with pytest.raises(BudgetHeld) as held:
            await budget.reserve(run_id, model="claude-3", estimate=Amounts(tokens=60))
        assert held.value.retry_after_seconds > 0
        assert held.value.retryable
        await budget.release(run_id, first.reservation.reservation_id)
        with pytest.raises(BudgetExhausted) as exhausted:
            await budget.reserve(run_id, model="claude-3", estimate=Amounts(tokens=101))
        assert (exhausted.value.dimension, exhausted.value.limit) == (Dimension.TOKENS, 100)
        assert exhausted.value.observed == 101


async def test_memory_capacity_refusal_is_capacity_exceeded(start_server: StartServer) -> None:
    runner = await start_server("memory", RATION_MEMORY_MAX_ACTIVE_ENTRIES="1")
    async with MemoryClient(f"127.0.0.1:{runner.port}") as memory:
        await memory.append("agent/1", ["first fact"])
        with pytest.raises(CapacityExceeded) as refused:
            await memory.append("agent/1", ["second fact"])
    assert (refused.value.dimension, refused.value.limit) == ("active_entries", 1)
    assert refused.value.observed == 2


async def test_forget_redacts_the_run_secrets_from_its_reason(
    shared_servers: SharedServers,
) -> None:
    secret, ref = "hunter2-correct-horse", new_id("agent/2")
    async with MemoryClient(shared_servers.address("memory")) as memory:
        (written,) = (await memory.append(ref, ["a fact"])).entries
        forgot = await memory.forget(
            ref, [written.entry_id], reason=f"leaked {secret}", secrets={"run": secret}
        )
    assert forgot.changes[0].reason == "leaked [REDACTED:run]"


def rpc_error(reason: str, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="ration.budget.v1"))
    status = status_pb2.Status(code=code.value[0], message="m", details=[info])
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, "m")


DOCUMENTED = {  # DESIGN.md section 11, reason → code
    "VALIDATION_FAILED": grpc.StatusCode.INVALID_ARGUMENT,
    "REQUEST_ID_REUSED": grpc.StatusCode.INVALID_ARGUMENT,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "ROLE_REQUIRED": grpc.StatusCode.PERMISSION_DENIED,
    "RUN_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RESERVATION_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "MEMORY_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ENTRY_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "RUN_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "BUDGET_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "BUDGET_HELD": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "BUDGET_MODEL_DENIED": grpc.StatusCode.FAILED_PRECONDITION,
    "RUN_INTERRUPTED": grpc.StatusCode.FAILED_PRECONDITION,
    "RUN_CLOSED": grpc.StatusCode.FAILED_PRECONDITION,
    "RESERVATION_SETTLED": grpc.StatusCode.FAILED_PRECONDITION,
    "MEMORY_CAPACITY_EXCEEDED": grpc.StatusCode.FAILED_PRECONDITION,
    "COMPACTION_DISABLED": grpc.StatusCode.FAILED_PRECONDITION,
    "RELEVANCE_UNAVAILABLE": grpc.StatusCode.FAILED_PRECONDITION,
    "HISTORY_WINDOW_EXCEEDED": grpc.StatusCode.FAILED_PRECONDITION,
    "REVISION_CONFLICT": grpc.StatusCode.ABORTED,
    "STORE_UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "STORE_BUSY": grpc.StatusCode.UNAVAILABLE,
    "TENANT_BUSY": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@pytest.mark.parametrize(("reason", "code"), sorted(DOCUMENTED.items()))
def test_every_documented_reason_maps_to_its_exception(reason: str, code: grpc.StatusCode) -> None:
    error = client_errors.decode(rpc_error(reason, code))
    assert type(error) is client_errors.BY_REASON[reason]
    assert type(error) is not client_errors.RationError
    assert (error.reason, error.code) == (reason, code)


class BusyFirst(grpc.aio.UnaryUnaryClientInterceptor):
    """Answers the first call of `method` with STORE_BUSY without sending it, as a server
    whose pool stayed full would."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.refused = 0
        self.sent = 0

    async def intercept_unary_unary(
        self, continuation: Any, details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith(self.method):
            if not self.refused:
                self.refused += 1
                raise rpc_error("STORE_BUSY", grpc.StatusCode.UNAVAILABLE)
            self.sent += 1
        return await continuation(details, request)


def test_store_busy_is_a_retryable_unavailable() -> None:
    error = client_errors.decode(rpc_error("STORE_BUSY", grpc.StatusCode.UNAVAILABLE))
    assert isinstance(error, StoreBusy)
    assert isinstance(error, Unavailable)  # `except Unavailable` covers both store reasons
    assert error.retryable


async def test_the_client_retries_store_busy_with_the_same_request(
    shared_budget_address: str,
) -> None:
    run_id = new_id("r7")
    busy = BusyFirst("/GetRun")
    async with BudgetClient(shared_budget_address, interceptors=[busy]) as budget:
        await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=10))
        run = await budget.get_run(run_id)
    assert run.run_id == run_id
    assert (busy.refused, busy.sent) == (1, 1)


async def reservation_state(db: asyncpg.Connection, run_id: str) -> list[str]:
    rows = await db.fetch("SELECT state FROM budget.holds WHERE run_id = $1", run_id)
    return [r["state"] for r in rows]


async def test_a_hold_left_by_an_exception_is_released(
    shared_budget_address: str, shared_db: asyncpg.Connection
) -> None:
    run_id = new_id("r3")
    async with BudgetClient(shared_budget_address) as budget:
        await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=1000))
        with pytest.raises(RuntimeError, match="provider failed"):
            async with budget.call(run_id, model="gpt-4o", estimate=Amounts(tokens=500)):
                raise RuntimeError("provider failed")
        run = await budget.get_run(run_id)
    assert await reservation_state(shared_db, run_id) == ["released"]
    assert all(d.held == 0 for d in run.dimensions)


async def test_a_hold_of_a_cancelled_task_is_released_not_left_to_expire(
    shared_budget_address: str, shared_db: asyncpg.Connection
) -> None:
    run_id = new_id("r4")
    async with BudgetClient(shared_budget_address) as budget:
        await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tokens=1000))
        inside = asyncio.Event()

        async def agent_step() -> None:
            async with budget.call(run_id, model="gpt-4o", estimate=Amounts(tokens=500)):
                inside.set()
                await asyncio.sleep(3600)  # a model call that never returns

        task = asyncio.create_task(agent_step())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await reservation_state(shared_db, run_id) == ["released"]


async def test_tool_call_helper_holds_and_settles_one_tool_call(
    shared_budget_address: str, shared_db: asyncpg.Connection
) -> None:
    run_id = new_id("r5")
    async with BudgetClient(shared_budget_address) as budget:
        await budget.open_run(run_id, project_id="p", policy=BudgetPolicy(max_tool_calls=1))
        async with budget.tool_call(run_id) as tool:
            assert tool.granted.tool_calls == 1
            await tool.consume(Amounts(tool_calls=1))
        with pytest.raises(BudgetExhausted):
            async with budget.tool_call(run_id):
                pass
    assert await reservation_state(shared_db, run_id) == ["consumed"]


async def test_watch_resumes_after_the_last_seen_event(shared_budget_address: str) -> None:
    run_id = new_id("r6")
    async with BudgetClient(shared_budget_address) as budget:
        await budget.open_run(
            run_id, project_id="p", policy=BudgetPolicy(max_tokens=100, threshold_percent=50)
        )
        await budget.consume(run_id, model="gpt-4o", usage=Amounts(tokens=60))
        seen = []
        async for event in budget.watch(run_id):
            seen.append(event.type)
            if len(seen) == 3:
                break
        assert seen == ["budget.reserved", "budget.consumed", "budget.threshold.crossed"]
        await budget.consume(run_id, model="gpt-4o", usage=Amounts(tokens=40))
        later = []
        async for event in budget.watch(run_id, after_seq=3):
            later.append((event.seq, event.type))
            if event.type == "budget.exhausted":
                break
        assert later == [(4, "budget.consumed"), (5, "budget.exhausted")]
