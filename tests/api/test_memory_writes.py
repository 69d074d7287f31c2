"""The write RPCs end to end: revisions, compare-and-swap, idempotency, SR-1, TTL, tenancy."""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest
from google.protobuf import timestamp_pb2

from memory_service.domain.token_counters import TokenCounter
from ration.memory.v1 import memory_pb2
from tests.support.adapters import shared_tokenizer
from tests.support.errors import rpc_error
from tests.support.ids import new_id
from tests.support.memory import MEMORY_TABLES, Memory, entry, request_id
from tests.support.servers import StartServer
from tests.support.token_files import write_token_file

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5" * 4
RUN_SECRET = "hunter2-but-longer"


async def test_first_append_creates_the_memory_at_revision_1_with_sized_versions(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/first"))
    text = "Les données sont prêtes 🎉 — def f(x): return x ** 2"
    reply = await memory.append(
        entry(text, kind="fact", tags=["a", "b"], metadata={"source": "chat"}),
        expected_revision=0,
    )
    assert reply.result.revision == 1
    stored = reply.entries[0]
    assert (stored.version, stored.previous_version_id, stored.created_in_revision) == (1, "", 1)
    assert (stored.kind, list(stored.tags), dict(stored.metadata)) == (
        "fact",
        ["a", "b"],
        {"source": "chat"},
    )
    counter = shared_tokenizer()
    assert (stored.sizes.o200k_base, stored.sizes.cl100k_base, stored.sizes.chars) == (
        counter.count(TokenCounter.O200K_BASE, text),
        counter.count(TokenCounter.CL100K_BASE, text),
        len(text),
    )
    capacity = reply.result.capacity
    assert (capacity.revision, capacity.active_entry_count, capacity.manifest_entry_count) == (
        1,
        1,
        1,
    )
    assert [c.op for c in reply.result.changes] == [memory_pb2.CHANGE_OP_ADD]


async def test_a_stale_expected_revision_is_a_conflict(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/cas"))
    first = await memory.append("one")
    await memory.append("two", expected_revision=1)
    entry_id = first.entries[0].entry_id
    for call in (
        memory.append("three", expected_revision=1),
        memory.forget(entry_id, expected_revision=0),
        memory.revise(entry_id, "uno", expected_revision=5),
    ):
        error = await rpc_error(call)
        assert (error.code, error.reason) == (grpc.StatusCode.ABORTED, "REVISION_CONFLICT")
        assert error.metadata["actual"] == "2"
    assert await memory.head() == 2


async def test_a_retried_request_id_replays_and_a_reused_one_is_refused(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/idempotent"))
    rid = request_id()
    first = await memory.append("once", rid=rid)
    again = await memory.append("once", rid=rid)
    assert again == first
    assert await memory.head() == 1
    error = await rpc_error(memory.append("something else", rid=rid))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")


async def test_concurrent_appends_serialise_into_distinct_revisions(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/concurrent"))
    replies = await asyncio.gather(*(memory.append(f"parallel {n}") for n in range(12)))
    assert sorted(r.result.revision for r in replies) == list(range(1, 13))
    assert (await memory.capacity()).active_entry_count == 12


async def test_forget_reactivate_and_dedupe_follow_the_manifest(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/states"))
    first = await memory.append("same text", "other")
    later = await memory.append("same text")
    keep, other = (e.entry_id for e in first.entries)
    duplicate = later.entries[0].entry_id

    forgot = await memory.forget(other, reason="outdated")
    assert forgot.result.capacity.active_entry_count == 2
    noop = await memory.forget(other)  # already inactive: no revision
    assert (noop.result.revision, list(noop.result.changes)) == (3, [])
    back = await memory.reactivate(other)
    assert [c.op for c in back.result.changes] == [memory_pb2.CHANGE_OP_REACTIVATE]

    deduped = await memory.dedupe()
    # The earliest copy survives: the one appended at revision 1.
    assert list(deduped.deactivated_entry_ids) == [duplicate]
    assert [c.reason for c in deduped.result.changes] == ["dedupe"]
    assert keep != duplicate
    assert list((await memory.dedupe()).deactivated_entry_ids) == []
    error = await rpc_error(memory.revise(duplicate, "revived?"))
    assert error.reason == "ENTRY_NOT_FOUND"  # inactive entries are not revised


async def test_secrets_are_redacted_before_anything_is_stored(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    # It dumps whole tables: a database of its own, not the module's shared one.
    memory = Memory(memory_channel, "writes/sr1")
    reply = await memory.append(
        entry(
            f"deploy with {RUN_SECRET} and key {OPENAI_KEY}",
            tags=[f"t-{RUN_SECRET}"],
            metadata={"note": RUN_SECRET},
        ),
        secrets={"db_password": RUN_SECRET},
    )
    stored = reply.entries[0]
    assert stored.content == (
        "deploy with [REDACTED:db_password] and key [REDACTED:openai_api_key]"
    )
    assert {r.name: r.count for r in reply.redactions} == {"db_password": 3, "openai_api_key": 1}
    revised = await memory.revise(
        stored.entry_id, f"rotated {RUN_SECRET}", secrets={"db_password": RUN_SECRET}
    )
    assert revised.entry.content == "rotated [REDACTED:db_password]"

    row = await db.fetchrow(
        "SELECT content, tags, metadata::text AS metadata FROM memory.entry_versions"
        " WHERE entry_version_id = $1",
        stored.entry_version_id,
    )
    assert "[REDACTED:db_password]" in row["content"]
    assert "[REDACTED:openai_api_key]" in row["content"]
    for table in MEMORY_TABLES:  # no table or column holds either value
        dump = await db.fetchval(
            f"SELECT coalesce(string_agg(t::text, ''), '') FROM memory.{table} t"
        )
        assert RUN_SECRET not in dump
        assert OPENAI_KEY not in dump
    # Stored responses (bytea, hex in the dump above) are checked as the bytes they are.
    for response in await db.fetch("SELECT response FROM memory.request_log"):
        assert RUN_SECRET.encode() not in response["response"]
        assert OPENAI_KEY.encode() not in response["response"]


async def test_expiry_is_stored_and_must_be_in_the_future(
    shared_memory_channel: grpc.aio.Channel,
) -> None:
    memory = Memory(shared_memory_channel, new_id("writes/ttl"))
    later = datetime.now(UTC) + timedelta(days=1)
    stamp = timestamp_pb2.Timestamp(seconds=int(later.timestamp()))
    stored = (await memory.append(entry("short-lived", expires_at=stamp))).entries[0]
    assert stored.expires_at.seconds == stamp.seconds
    assert (await memory.version(stored.entry_version_id)).expires_at.seconds == stamp.seconds
    past = timestamp_pb2.Timestamp(seconds=int((datetime.now(UTC) - timedelta(1)).timestamp()))
    error = await rpc_error(memory.append(entry("stale", expires_at=past)))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    return write_token_file(
        tmp_path / "tokens.json",
        ("alpha-writer", "alpha", ["writer"]),
        ("alpha-reader", "alpha", ["reader"]),
        ("beta-writer", "beta", ["writer"]),
    )


async def test_tenants_never_see_each_other_and_readers_cannot_write(
    start_server: StartServer, token_file: Path
) -> None:
    runner = await start_server("memory", RATION_TOKEN_FILE=str(token_file))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        alpha = Memory(channel, "shared/name", token="alpha-writer")
        stored = (await alpha.append("alpha's note")).entries[0]
        beta = Memory(channel, "shared/name", token="beta-writer")
        absent = await rpc_error(Memory(channel, "never", token="beta-writer").capacity())
        for call in (
            beta.capacity(),
            beta.version(stored.entry_version_id),
            beta.cite(1, stored.entry_id, stored.entry_version_id),
            beta.revisions(0, 1),
        ):
            error = await rpc_error(call)
            assert (error.code, error.reason, error.message) == (
                absent.code,
                absent.reason,
                absent.message,
            )
        assert (await rpc_error(beta.forget(stored.entry_id))).reason == "MEMORY_NOT_FOUND"
        # Beta's first write creates beta's own memory under the same ref.
        assert (await beta.append("beta's note")).result.revision == 1
        assert (await alpha.capacity()).active_entry_count == 1

        reader = Memory(channel, "shared/name", token="alpha-reader")
        assert (await reader.capacity()).revision == 1
        error = await rpc_error(reader.append("not allowed"))
        assert (error.code, error.reason, error.metadata) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "ROLE_REQUIRED",
            {"role": "writer"},
        )


async def test_domain_metrics_count_committed_effects_without_ids(
    start_server: StartServer,
) -> None:
    runner = await start_server("memory", RATION_MEMORY_MAX_ACTIVE_ENTRIES="2")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "writes/metrics")
        rid = request_id()
        await memory.append(
            f"token {OPENAI_KEY} and {RUN_SECRET}", "b", rid=rid, secrets={"my-id": RUN_SECRET}
        )
        await memory.append(
            f"token {OPENAI_KEY} and {RUN_SECRET}", "b", rid=rid, secrets={"my-id": RUN_SECRET}
        )  # a replay counts nothing
        await rpc_error(memory.append("c"))
        await memory.compact(dry_run=True)
    url = f"http://127.0.0.1:{runner.metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert 'ration_memory_writes_total{operation="append"} 1.0' in text
    assert "ration_memory_entries_appended_total 2.0" in text
    assert 'ration_memory_capacity_refusals_total{dimension="active_entries"} 1.0' in text
    assert 'ration_memory_redactions_total{detector="request_secret"} 1.0' in text
    assert 'ration_memory_redactions_total{detector="openai_api_key"} 1.0' in text
    assert 'ration_memory_compactions_total{mode="dry_run"} 1.0' in text
    assert "ration_memory_manifest_bytes_count 1.0" in text
    for private in ("my-id", "writes/metrics", "mem_ent_", RUN_SECRET):
        assert private not in text
