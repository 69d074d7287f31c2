"""Memory scenarios: memories prefilled to a size, single-entry appends, budgeted ListMemory."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from bench.caller import Caller, Op, auth, unary
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as pb

SERVICE = "/ration.memory.v1.MemoryService/"
TOKEN_BUDGET = 800
RELEVANCE_QUERY = "which database and connection pool does the billing service use in production?"
_SUBJECTS = (
    "the billing service", "the user", "the deploy pipeline", "the search index", "the team",
    "the nightly job", "the staging cluster", "the payments API", "the agent", "the dashboard",
)  # fmt: skip
_FACTS = (
    "prefers concise answers with code samples", "runs on Postgres 16 behind PgBouncer",
    "was migrated to the new region last week", "times out when the queue exceeds ten thousand",
    "uses a connection pool of twenty per replica", "must never log customer email addresses",
    "is owned by the platform group and paged at night", "caches results for fifteen minutes",
    "needs a feature flag before every schema change", "reports cost in nanos of a dollar",
)  # fmt: skip
_DETAILS = (
    "according to the incident review", "as noted in the runbook", "per the architecture doc",
    "confirmed in the last standup", "which the on-call engineer verified",
)  # fmt: skip


def memory_ref(size: int, copy: int = 0, kind: str = "memory") -> str:
    """The memory ListMemory reads at `size` is copy 0; appends also use further copies; the
    never-analyzed append figure uses memories of its own (`kind` "fresh")."""
    return f"bench/{kind}-{size}" if copy == 0 else f"bench/{kind}-{size}-{copy}"


def entry_text(index: int) -> str:
    """Deterministic, varied prose of roughly 40 o200k tokens; unique per index."""
    rng = random.Random(index)
    sentences = [
        f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_FACTS)}, {rng.choice(_DETAILS)}."
        for _ in range(2)
    ]
    return " ".join(sentences) + f" (note {index})"


def entries(start: int, count: int) -> list[m.EntryInput]:
    return [
        m.EntryInput(kind="fact", content=entry_text(i), tags=["bench"])
        for i in range(start, start + count)
    ]


class Memories:
    """Parent-side setup calls on one channel: batched prefill, counts, a sample ListMemory."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.append = unary(channel, SERVICE + "AppendEntries", pb.AppendEntriesResponse)
        self.capacity = unary(channel, SERVICE + "GetCapacity", pb.GetCapacityResponse)
        self.list = unary(channel, SERVICE + "ListMemory", pb.ListMemoryResponse)

    async def fill(self, ref: str, have: int, want: int, batch: int) -> int:
        """Appends entries `have`..`want` in batches; returns the new count."""
        while have < want:
            count = min(batch, want - have)
            request = pb.AppendEntriesRequest(
                request_id=uuid.uuid4().hex, memory_ref=ref, entries=entries(have, count)
            )
            await self.append(request, timeout=120)
            have += count
        return have

    async def active(self, ref: str) -> int:
        response = await self.capacity(pb.GetCapacityRequest(memory_ref=ref), timeout=30)
        return int(response.capacity.active_entry_count)

    async def sample(self, ref: str, relevance: bool) -> dict[str, Any]:
        response = await self.list(list_request(ref, relevance), timeout=30)
        return {
            "returned_entries": len(response.entries),
            "total_tokens": int(response.total_tokens),
            "candidate_count": int(response.candidate_count),
            "omitted_count": int(response.omitted_count),
        }


def list_request(ref: str, relevance: bool) -> pb.ListMemoryRequest:
    return pb.ListMemoryRequest(
        memory_ref=ref,
        token_budget=TOKEN_BUDGET,
        token_counter=m.TOKEN_COUNTER_O200K_BASE,
        rank=m.RANK_RELEVANCE if relevance else m.RANK_RECENCY,
        query=RELEVANCE_QUERY if relevance else "",
    )


def append_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """One single-entry AppendEntries, round robin over `memory_refs`; content from `start`."""
    call = unary(
        channels[index % len(channels)], SERVICE + "AppendEntries", pb.AppendEntriesResponse
    )
    refs = [str(ref) for ref in params["memory_refs"]]
    counter = [0]
    first = int(params["start"]) + index * 1_000_000
    metadata = auth(params)

    async def op(caller: Caller) -> None:
        n = counter[0]
        counter[0] += 1
        request = pb.AppendEntriesRequest(
            request_id=uuid.uuid4().hex,
            memory_ref=refs[n % len(refs)],
            entries=entries(first + n, 1),
        )
        await caller.rpc("AppendEntries", call(request, timeout=caller.timeout, metadata=metadata))

    return op


def big_text(seed: int, size: int) -> str:
    """About `size` bytes of ASCII prose (real words for the tokenizer, no secret shapes)."""
    rng = random.Random(seed)
    vocabulary = sorted({w for text in (*_SUBJECTS, *_FACTS, *_DETAILS) for w in text.split()})
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(vocabulary)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def big_append_op(
    channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int
) -> Op:
    """AppendEntries of `entries` entries of `entry_bytes` each to a new memory per call (no
    memory fills up), as `tenant`: writes near the largest legal ones, what a tenant's share of
    the memory CPU (sizing, redaction, embedding) is spent on."""
    call = unary(
        channels[index % len(channels)], SERVICE + "AppendEntries", pb.AppendEntriesResponse
    )
    count, size = int(params["entries"]), int(params["entry_bytes"])
    # Built once per caller; each entry starts with its own number, so no two are equal.
    body = big_text(index, size - 16)
    metadata = auth(params)
    serial = [0]

    async def op(caller: Caller) -> None:
        serial[0] += 1
        batch = [
            m.EntryInput(kind="fact", content=f"{serial[0]:07d}-{i:03d} {body}", tags=["noisy"])
            for i in range(count)
        ]
        request = pb.AppendEntriesRequest(
            request_id=uuid.uuid4().hex, memory_ref=f"noisy/a-{uuid.uuid4().hex}", entries=batch
        )
        await caller.rpc("AppendEntries", call(request, timeout=caller.timeout, metadata=metadata))

    return op


def list_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """ListMemory with budget 800 o200k tokens, recency or relevance (with a fixed query)."""
    call = unary(channels[index % len(channels)], SERVICE + "ListMemory", pb.ListMemoryResponse)
    request = list_request(str(params["memory_ref"]), bool(params.get("relevance", False)))
    metadata = auth(params)

    async def op(caller: Caller) -> None:
        await caller.rpc("ListMemory", call(request, timeout=caller.timeout, metadata=metadata))

    return op
