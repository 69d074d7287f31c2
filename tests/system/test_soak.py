"""A bounded soak: two replicas of each service, every RPC mixed, then an audit.

For SOAK_SECONDS (15 in `make test`; `make soak` runs it for minutes) budget clients open runs
under a pooled project budget, a per-run cap or neither, in FAIL and INTERRUPT mode, and drive
them through Reserve (all-or-nothing and up-to), Consume (settling, overrunning, without a hold,
twice with the same request_id), Release, leaked holds, Check, GetRun, ListRunEvents,
WatchRunEvents, ResumeRun and CloseRun; memory clients append with compare-and-swap, revise,
forget, reactivate, dedupe, compact and read (ListMemory, SearchMemory, GetCapacity,
ListRevisions, GetChanges, GetEntryVersion, ValidateCitation). Calls go to either replica.

Every answer must be OK or a refusal the workload can provoke (a budget held or exhausted, a
run interrupted or closed, a settled hold, a stale head, a capacity refusal). The audit then
checks, from the tables: ledger totals equal run and pool balances; every run's events are
numbered from 1 without gaps; every hold ended exactly once or is open and unexpired; every
grant kept consumed + held within its run's and pools' limits; every acknowledged Consume was
recorded exactly once; and per memory, the revision chain is contiguous, every acknowledged
entry is in the head manifest (or was compacted), and GetCapacity's manifest_bytes equals the
RFC 8785 length of the materialised manifest.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import asyncpg
import grpc
import pytest

from ration.budget.v1 import budget_pb2 as b
from ration.budget.v1 import budget_service_pb2_grpc
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as mpb
from ration.memory.v1 import memory_service_pb2_grpc
from tests.support.audits import audit_budget, audit_memory, wait_for_no_overdue_reservations
from tests.support.errors import decode
from tests.support.procs import BIN, Proc, clean_env
from tests.support.replicas import Replicas

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "15"))
BUDGET_CLIENTS = 6
MEMORY_CLIENTS = 4
MEMORIES = 3
POOL_TOKENS = 60_000

pytestmark = [pytest.mark.system, pytest.mark.timeout(int(SOAK_SECONDS) + 300)]

# Refusals the workload provokes on purpose; anything else fails the soak.
EXPECTED = {
    "BUDGET_HELD", "BUDGET_EXHAUSTED", "BUDGET_MODEL_DENIED", "RUN_INTERRUPTED", "RUN_CLOSED",
    "RUN_FAILED", "RESERVATION_SETTLED", "REVISION_CONFLICT", "ENTRY_NOT_FOUND",
    "MEMORY_CAPACITY_EXCEEDED",
}  # fmt: skip
CONTENTS = ("prefers metric units", "deploys on Tuesdays", "the API key lives in the vault",
            "Café au lait 🎉", "uses Postgres 16")  # fmt: skip


def rid() -> str:
    return uuid.uuid4().hex


@dataclass
class Soak:
    budget: Replicas
    memory: Replicas
    deadline: float
    rng: random.Random
    outcomes: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    unexpected: list[tuple[str, str, str]] = field(default_factory=list)
    consumed: dict[str, int] = field(default_factory=dict)  # acknowledged Consume rid → tokens
    appended: dict[str, set[str]] = field(default_factory=dict)  # memory_ref → entry ids

    def going(self) -> bool:
        return time.monotonic() < self.deadline

    async def call(self, replicas: Replicas, method: str, request: Any) -> Any:
        """A call to either replica; None for an expected refusal, recorded otherwise."""
        try:
            reply = await replicas.call(self.rng.randrange(2), method, request, seconds=30)
        except grpc.aio.AioRpcError as error:
            details = decode(error)
            self.outcomes[(method, details.reason or details.code.name)] += 1
            if details.reason not in EXPECTED:
                self.unexpected.append((method, details.code.name, details.message[:200]))
            return details
        self.outcomes[(method, "OK")] += 1
        return reply


# --- budget clients ----------------------------------------------------------------------------


async def budget_client(soak: Soak, index: int) -> None:
    rng = random.Random(index)
    episode = 0
    while soak.going():
        episode += 1
        await budget_episode(soak, rng, f"soak-{index}-{episode}")
        if rng.random() < 0.1:
            await soak.call(soak.budget, "GetCapabilities", b.GetCapabilitiesRequest())
            await soak.call(
                soak.budget,
                "GetScopeBudget",
                b.GetScopeBudgetRequest(
                    scope=b.SCOPE_PROJECT, scope_id="soak-pool", kind=b.SCOPE_BUDGET_KIND_POOLED
                ),
            )


async def budget_episode(soak: Soak, rng: random.Random, run_id: str) -> None:
    policy = b.BudgetPolicy(
        max_tokens=rng.randint(150, 1500),
        max_tool_calls=rng.randint(3, 10),
        on_exhaustion=rng.choice([b.ON_EXHAUSTION_FAIL, b.ON_EXHAUSTION_INTERRUPT]),
    )
    if rng.random() < 0.5:
        policy.max_cost_nanos = rng.randint(10**8, 10**9)
    opened = b.OpenRunRequest(
        request_id=rid(),
        run_id=run_id,
        project_id=rng.choice(["soak-pool", "soak-pool", "soak-cap", "soak-free"]),
        policy=policy,
    )
    if not isinstance(await soak.call(soak.budget, "OpenRun", opened), b.OpenRunResponse):
        return
    if rng.random() < 0.2:  # a retry with the same request_id answers the same run
        await soak.call(soak.budget, "OpenRun", opened)
    for _ in range(rng.randint(4, 14)):
        if not soak.going():
            break
        await budget_step(soak, rng, run_id)
    if rng.random() < 0.8:
        closed = b.CloseRunRequest(
            request_id=rid(), run_id=run_id, outcome=cast(b.RunOutcome, rng.choice([1, 2, 3]))
        )
        await soak.call(soak.budget, "CloseRun", closed)


async def budget_step(soak: Soak, rng: random.Random, run_id: str) -> None:
    roll = rng.random()
    if roll < 0.55:
        await reserve_and_settle(soak, rng, run_id)
    elif roll < 0.65:
        await consume(soak, rng, run_id, "", rng.randint(0, 60), tool_calls=0)
    elif roll < 0.75:
        check = b.CheckRequest(
            run_id=run_id, model="gpt-4o", estimate=b.Amounts(tokens=rng.randint(1, 200))
        )
        await soak.call(soak.budget, "Check", check)
    elif roll < 0.82:
        await soak.call(soak.budget, "GetRun", b.GetRunRequest(run_id=run_id))
    elif roll < 0.9:
        await read_events(soak, rng, run_id)
    else:
        run = await soak.call(soak.budget, "GetRun", b.GetRunRequest(run_id=run_id))
        if isinstance(run, b.GetRunResponse) and run.run.state == b.RUN_STATE_INTERRUPTED:
            await resume(soak, rng, run_id)


async def resume(soak: Soak, rng: random.Random, run_id: str) -> None:
    """An approver raises an interrupted run's limits."""
    request = b.ResumeRunRequest(
        request_id=rid(),
        run_id=run_id,
        delta=b.Amounts(tokens=rng.randint(100, 1000), tool_calls=2),
        approver="soak@example.com",
    )
    await soak.call(soak.budget, "ResumeRun", request)


async def reserve_and_settle(soak: Soak, rng: random.Random, run_id: str) -> None:
    tool = rng.random() < 0.3
    reserve = b.ReserveRequest(
        request_id=rid(),
        run_id=run_id,
        model="o1-preview" if rng.random() < 0.05 else "gpt-4o",
        estimate=b.Amounts(
            tokens=0 if tool else rng.randint(10, 400),
            tool_calls=1 if tool else 0,
            cost_nanos=rng.randint(0, 10**7),
        ),
        ttl_seconds=rng.randint(1, 3),
        mode=rng.choice([b.RESERVE_MODE_ALL_OR_NOTHING, b.RESERVE_MODE_UP_TO]),
    )
    reservation = await soak.call(soak.budget, "Reserve", reserve)
    if getattr(reservation, "reason", "") == "RUN_INTERRUPTED" and rng.random() < 0.7:
        await resume(soak, rng, run_id)
    if not isinstance(reservation, b.ReserveResponse):
        return
    granted = reservation.reservation.granted
    fate = rng.random()
    if fate < 0.1:
        return  # leaked: it expires
    if fate < 0.2:
        release = b.ReleaseRequest(
            request_id=rid(), run_id=run_id, reservation_id=reservation.reservation.reservation_id
        )
        await soak.call(soak.budget, "Release", release)
        return
    tokens = rng.randint(0, granted.tokens)
    if rng.random() < 0.1:
        tokens += rng.randint(1, 100)  # an overrun: the provider billed more
    await consume(
        soak,
        rng,
        run_id,
        reservation.reservation.reservation_id,
        tokens,
        tool_calls=granted.tool_calls,
    )


async def consume(
    soak: Soak, rng: random.Random, run_id: str, reservation_id: str, tokens: int, tool_calls: int
) -> None:
    request = b.ConsumeRequest(
        request_id=rid(),
        run_id=run_id,
        reservation_id=reservation_id,
        model="gpt-4o",
        usage=b.Amounts(tokens=tokens, tool_calls=tool_calls, cost_nanos=rng.randint(0, 10**6)),
    )
    replies: Sequence[Any]
    if rng.random() < 0.15:  # the same request twice at once, on either replica: counted once
        replies = await asyncio.gather(*(soak.call(soak.budget, "Consume", request),) * 2)
    else:
        replies = [await soak.call(soak.budget, "Consume", request)]
    if any(isinstance(r, b.ConsumeResponse) for r in replies):
        soak.consumed[request.request_id] = tokens


async def read_events(soak: Soak, rng: random.Random, run_id: str) -> None:
    if rng.random() < 0.5:
        listed = b.ListRunEventsRequest(run_id=run_id, page_size=rng.randint(1, 5))
        while soak.going():
            page = await soak.call(soak.budget, "ListRunEvents", listed)
            if not isinstance(page, b.ListRunEventsResponse) or not page.next_page_token:
                return
            listed.page_token = page.next_page_token
        return
    # Follow live for a moment: events arrive in order, from 1, without gaps.
    stub = soak.budget.stubs[rng.randrange(2)]
    call = stub.WatchRunEvents(b.WatchRunEventsRequest(run_id=run_id), timeout=30)
    seqs = []
    try:
        while True:
            item = await asyncio.wait_for(call.read(), 0.2)
            if item is grpc.aio.EOF:
                break
            seqs.append(item.event.seq)
    except TimeoutError:
        call.cancel()
    except grpc.aio.AioRpcError as error:
        soak.unexpected.append(("WatchRunEvents", error.code().name, error.details() or ""))
    soak.outcomes[("WatchRunEvents", "OK")] += 1
    if seqs != list(range(1, len(seqs) + 1)):
        soak.unexpected.append(("WatchRunEvents", "ORDER", str(seqs)))


# --- memory clients ----------------------------------------------------------------------------


@dataclass
class MemoryView:
    """What one client last saw of one memory."""

    ref: str
    head: int = 0
    entries: list[tuple[str, str]] = field(default_factory=list)  # (entry_id, version id)


class WriteHead(TypedDict):
    """The fields every write request carries: a fresh id, the memory and the head it saw."""

    request_id: str
    memory_ref: str
    expected_revision: int


async def memory_client(soak: Soak, index: int) -> None:
    rng = random.Random(1000 + index)
    views = [MemoryView(f"soak/mem-{k}") for k in range(MEMORIES)]
    while soak.going():
        view = rng.choice(views)
        roll = rng.random()
        if roll < 0.35 or not view.entries:
            await append(soak, rng, view)
        elif roll < 0.65:
            await memory_write(soak, rng, view)
        else:
            await memory_read(soak, rng, view)


def refresh(view: MemoryView, reply: Any) -> None:
    if isinstance(reply, m.WriteResult):
        view.head = reply.revision
    elif reply is not None and getattr(reply, "reason", "") == "REVISION_CONFLICT":
        view.head = int(reply.metadata["actual"])


async def append(soak: Soak, rng: random.Random, view: MemoryView) -> None:
    request = mpb.AppendEntriesRequest(
        request_id=rid(),
        memory_ref=view.ref,
        entries=[
            m.EntryInput(
                entry_id="mem_ent_" + uuid.uuid4().hex,
                content=rng.choice(CONTENTS),
                tags=["keep"] if rng.random() < 0.2 else [],
            )
            for _ in range(rng.randint(1, 3))
        ],
        expected_revision=view.head,
    )
    reply = await soak.call(soak.memory, "AppendEntries", request)
    if isinstance(reply, mpb.AppendEntriesResponse):
        refresh(view, reply.result)
        soak.appended.setdefault(view.ref, set()).update(e.entry_id for e in reply.entries)
        view.entries += [(e.entry_id, e.entry_version_id) for e in reply.entries]
        return
    refresh(view, reply)
    if getattr(reply, "reason", "") == "MEMORY_CAPACITY_EXCEEDED":
        # Relief, as an agent would: forget a few entries (never refused for capacity).
        for entry_id, _ in rng.sample(view.entries, min(4, len(view.entries))):
            forget = mpb.ForgetEntriesRequest(
                request_id=rid(), memory_ref=view.ref, entry_ids=[entry_id], reason="full"
            )
            settle(view, entry_id, await soak.call(soak.memory, "ForgetEntries", forget))


def settle(view: MemoryView, entry_id: str, reply: Any) -> None:
    """Follows the head; an entry the memory no longer offers is dropped from the view."""
    refresh(view, getattr(reply, "result", reply))
    if getattr(reply, "reason", "") == "ENTRY_NOT_FOUND":
        view.entries = [e for e in view.entries if e[0] != entry_id]


async def memory_write(soak: Soak, rng: random.Random, view: MemoryView) -> None:
    entry_id, _ = rng.choice(view.entries)
    roll = rng.random()
    base: WriteHead = {"request_id": rid(), "memory_ref": view.ref, "expected_revision": view.head}
    if roll < 0.3:
        request: Any = mpb.ReviseEntryRequest(
            **base, entry_id=entry_id, entry=m.EntryInput(content=rng.choice(CONTENTS))
        )
        method = "ReviseEntry"
    elif roll < 0.55:
        request, method = mpb.ForgetEntriesRequest(**base, entry_ids=[entry_id]), "ForgetEntries"
    elif roll < 0.75:
        request = mpb.ReactivateEntriesRequest(**base, entry_ids=[entry_id])
        method = "ReactivateEntries"
    elif roll < 0.9:
        request = mpb.OrganizeMemoryRequest(**base, mode=m.ORGANIZE_MODE_DEDUPE)
        method = "OrganizeMemory"
    else:
        preview = await soak.call(
            soak.memory,
            "CompactMemory",
            mpb.CompactMemoryRequest(memory_ref=view.ref, dry_run=True, limit=3),
        )
        if not isinstance(preview, mpb.CompactMemoryResponse):
            return
        request = mpb.CompactMemoryRequest(
            request_id=rid(), memory_ref=view.ref, limit=3, expected_revision=preview.revision
        )
        method = "CompactMemory"
    reply = await soak.call(soak.memory, method, request)
    if isinstance(reply, mpb.CompactMemoryResponse):
        view.head = reply.revision
    elif isinstance(reply, mpb.ReviseEntryResponse):
        refresh(view, reply.result)
        view.entries.append((entry_id, reply.entry.entry_version_id))
    else:
        settle(view, entry_id, reply)


async def memory_read(soak: Soak, rng: random.Random, view: MemoryView) -> None:
    entry_id, version_id = rng.choice(view.entries)
    ref = view.ref
    roll = rng.random()
    if roll < 0.3:
        budget = rng.choice([0, 5, 50, 500])
        request: Any = mpb.ListMemoryRequest(memory_ref=ref, token_budget=budget, tag="")
        reply = await soak.call(soak.memory, "ListMemory", request)
        listed = isinstance(reply, mpb.ListMemoryResponse)
        if listed and budget and reply.total_tokens > budget:
            soak.unexpected.append(("ListMemory", "OVER_BUDGET", str(reply.total_tokens)))
        return
    if roll < 0.45:
        request = mpb.SearchMemoryRequest(
            memory_ref=ref, mode=m.SEARCH_MODE_FILTER, tags=["keep"], limit=5
        )
        await soak.call(soak.memory, "SearchMemory", request)
    elif roll < 0.6:
        reply = await soak.call(soak.memory, "GetCapacity", mpb.GetCapacityRequest(memory_ref=ref))
        if isinstance(reply, mpb.GetCapacityResponse):
            view.head = max(view.head, reply.capacity.revision)
    elif roll < 0.7:
        since = max(0, view.head - 10)
        request = mpb.ListRevisionsRequest(memory_ref=ref, since=since, through=view.head)
        await soak.call(soak.memory, "ListRevisions", request)
    elif roll < 0.8:
        request = mpb.GetChangesRequest(memory_ref=ref, since=max(0, view.head - 5), page_size=20)
        await soak.call(soak.memory, "GetChanges", request)
    elif roll < 0.9:
        request = mpb.GetEntryVersionRequest(memory_ref=ref, entry_version_id=version_id)
        await soak.call(soak.memory, "GetEntryVersion", request)
    else:
        request = mpb.ValidateCitationRequest(
            memory_ref=ref,
            revision=max(1, view.head),
            entry_id=entry_id,
            entry_version_id=version_id,
        )
        await soak.call(soak.memory, "ValidateCitation", request)


# --- the soak and its audit -------------------------------------------------------------------


async def soak_and_audit(procs: dict[str, list[Proc]], database_url: str) -> Soak:
    budget = Replicas(
        [p.addresses["budget"] for p in procs["budget"]], budget_service_pb2_grpc.BudgetServiceStub
    )
    memory = Replicas(
        [p.addresses["memory"] for p in procs["memory"]], memory_service_pb2_grpc.MemoryServiceStub
    )
    scopes = [
        b.ScopeBudget(
            scope=b.SCOPE_PROJECT,
            scope_id="soak-pool",
            kind=b.SCOPE_BUDGET_KIND_POOLED,
            policy=b.BudgetPolicy(max_tokens=POOL_TOKENS, max_tool_calls=2_000),
        ),
        b.ScopeBudget(
            scope=b.SCOPE_PROJECT,
            scope_id="soak-cap",
            kind=b.SCOPE_BUDGET_KIND_PER_RUN_CAP,
            policy=b.BudgetPolicy(max_tokens=1500, model_deny=["o1-*"]),
        ),
    ]
    for scope in scopes:
        await budget.call(
            0, "PutScopeBudget", b.PutScopeBudgetRequest(request_id=rid(), budget=scope)
        )
    soak = Soak(budget, memory, time.monotonic() + SOAK_SECONDS, random.Random(3))
    await asyncio.gather(
        *(budget_client(soak, i) for i in range(BUDGET_CLIENTS)),
        *(memory_client(soak, i) for i in range(MEMORY_CLIENTS)),
    )

    async def head_bytes(ref: str) -> tuple[int, int]:
        reply = await memory.call(0, "GetCapacity", mpb.GetCapacityRequest(memory_ref=ref))
        return reply.capacity.revision, reply.capacity.manifest_bytes

    conn = await asyncpg.connect(database_url)
    try:
        await wait_for_no_overdue_reservations(conn, 60)
        counts = await audit_budget(conn)
        assert counts["grants_checked"] > 0
        rows = await conn.fetch(
            "SELECT request_id, consumed_tokens FROM budget.ledger WHERE decision = 'consume'"
        )
        recorded = {r["request_id"]: r["consumed_tokens"] for r in rows}
        assert len(recorded) == len(rows), "a Consume was recorded twice"
        assert recorded == soak.consumed, "acknowledged usage lost, or unacknowledged kept"
        await audit_memory(conn, head_bytes)
        for ref, entry_ids in soak.appended.items():
            kept = {
                r["entry_id"]
                for r in await conn.fetch(
                    "SELECT i.entry_id FROM memory.manifest_items i JOIN memory.memories m"
                    " USING (tenant_id, memory_id) WHERE m.memory_ref = $1 AND i.to_rev IS NULL"
                    " UNION SELECT c.entry_id FROM memory.changes c JOIN memory.memories m"
                    " USING (tenant_id, memory_id) WHERE m.memory_ref = $1 AND c.op = 'compact'",
                    ref,
                )
            }
            assert entry_ids <= kept, f"{ref}: acknowledged entries lost: {entry_ids - kept}"
    finally:
        await conn.close()
        await budget.close()
        await memory.close()
    return soak


def test_soak_two_replicas_each_mixed_rpcs_then_the_books_balance(database_url: str) -> None:
    env = clean_env(
        RATION_DATABASE_URL=database_url,
        RATION_SWEEP_INTERVAL_MS="200",
        RATION_DB_POOL_MAX="6",
        RATION_LOG_LEVEL="WARNING",
        RATION_MEMORY_EMBEDDER="false",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="2",
        RATION_MEMORY_MAX_ACTIVE_ENTRIES="80",
        RATION_MEMORY_MAX_MANIFEST_ENTRIES="160",
    )
    procs = {
        name: [Proc.start([str(BIN / "ration"), name, "serve"], env) for _ in range(2)]
        for name in ("budget", "memory")
    }
    everything = [p for group in procs.values() for p in group]
    try:
        for proc in everything:
            proc.wait_for("ready:")
        soak = asyncio.run(soak_and_audit(procs, database_url))
        summary = sorted(soak.outcomes.items())
        assert not soak.unexpected, (soak.unexpected[:10], summary)
        assert sum(n for (_, outcome), n in summary if outcome == "OK") > 0
        print(f"soak {SOAK_SECONDS:.0f}s: {sum(soak.outcomes.values())} calls", summary)
        for proc in everything:
            assert proc.popen.poll() is None, proc.stderr_tail()
            assert proc.stop(signal.SIGTERM) == 0, proc.stderr_tail()
    finally:
        for proc in everything:
            if proc.popen.poll() is None:
                proc.stop(signal.SIGKILL)
