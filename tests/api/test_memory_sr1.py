"""SR-1 end to end: what Postgres holds is the marker, never the secret, through revise, dedupe,
compaction, the search index, the stored vectors and every read path (acceptance 5)."""

from __future__ import annotations

import asyncpg
import grpc
import numpy as np
from google.rpc import error_details_pb2

from memory_service.adapters.embedder import from_bytes
from ration.memory.v1 import memory_pb2 as m
from tests.support.adapters import shared_embedder
from tests.support.errors import rpc_error
from tests.support.memory import MEMORY_TABLES, Memory, entry, row_counts
from tests.support.servers import StartServer, scrape

RUN_SECRET = "hunter2-correct-horse"
# Fake credentials, assembled at runtime so that secret scanners do not flag this file.
DETECTED = {
    "openai_api_key": "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5q_Rs8tUv1wXy4z-" * 2,
    "aws_access_key_id": "AKIA" + "IOSFODNN7EXAMPLE",
    "github_token": "gh" + "p_" + "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq0x9Yz/+AbCdEf==\n"
    "-----END RSA PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
}
TWIN_SECRETS = ("alpha-secret-value-1", "beta-secret-value-22")


async def assert_no_secret_stored(db: asyncpg.Connection, secrets: list[str]) -> None:
    """No row of any memory table, in any column (the tsvector included), holds one; stored
    responses are bytea, so they are checked as bytes."""
    for table in MEMORY_TABLES:
        dump = await db.fetchval(
            f"SELECT coalesce(string_agg(t::text, ''), '') FROM memory.{table} t"
        )
        for secret in secrets:
            assert secret not in dump, table
            assert secret.lower() not in dump.lower(), table  # tsvector lexemes are lower case
    for row in await db.fetch("SELECT response FROM memory.request_log"):
        for secret in secrets:
            assert secret.encode() not in row["response"]


async def test_markers_replace_secrets_everywhere_and_survive_revise_dedupe_and_compaction(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    runner = await start_server(
        "memory",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
    )
    embedder = shared_embedder()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "sr1/everything")
        detected = [f"{name} here: {value} (rotate it)" for name, value in DETECTED.items()]
        reply = await memory.append(
            *detected,
            f"db password is {RUN_SECRET}",
            secrets={"db_password": RUN_SECRET},
        )
        stored = list(reply.entries)
        for name, version in zip(DETECTED, stored, strict=False):
            assert f"[REDACTED:{name}]" in version.content
        assert stored[-1].content == "db password is [REDACTED:db_password]"
        # Straight from Postgres: the marker, never the value.
        row = await db.fetchrow(
            "SELECT content, search_vector::text AS words, embedding FROM memory.entry_versions"
            " WHERE entry_version_id = $1",
            stored[-1].entry_version_id,
        )
        assert row["content"] == "db password is [REDACTED:db_password]"
        assert "redacted" in row["words"]
        assert "hunter2" not in row["words"]
        # The vector was computed from the redacted content.
        assert np.array_equal(from_bytes(row["embedding"]), embedder.embed(row["content"]))

        # Revise: the new version is redacted too; the old one keeps its marker.
        revised = await memory.revise(
            stored[-1].entry_id,
            f"rotated to {RUN_SECRET}!",
            secrets={"db_password": RUN_SECRET},
        )
        assert revised.entry.content == "rotated to [REDACTED:db_password]!"
        # Dedupe sees only redacted content: two different values under one id are duplicates.
        first, second = TWIN_SECRETS
        twins = await memory.append(entry(f"token: {first}", tags=["t"]), secrets={"token": first})
        twin = await memory.append(entry(f"token: {second}", tags=["t"]), secrets={"token": second})
        organized = await memory.dedupe()
        assert list(organized.deactivated_entry_ids) == [twin.entries[0].entry_id]
        kept = await memory.version(twins.entries[0].entry_version_id)
        assert kept.content == "token: [REDACTED:token]"

        # Compaction drops an untagged tombstone; every surviving version keeps its marker.
        await memory.forget(stored[0].entry_id)
        preview = await memory.compact(dry_run=True)
        assert stored[0].entry_id in preview.entry_ids
        await memory.compact(expected_revision=preview.revision)
        head = await memory.list_memory(token_counter=m.TOKEN_COUNTER_CHARS)
        contents = [e.content for e in head.entries]
        assert "rotated to [REDACTED:db_password]!" in contents
        assert "token: [REDACTED:token]" in contents
        assert all("[REDACTED:" in c for c in contents)
        hits = await memory.search(mode=m.SEARCH_MODE_SEMANTIC, query="database password")
        assert all("[REDACTED:" in h.entry.content for h in hits.hits)
        old = await memory.version(stored[0].entry_version_id)  # compacted, still readable
        assert "[REDACTED:openai_api_key]" in old.content

    await assert_no_secret_stored(db, [RUN_SECRET, *DETECTED.values(), *TWIN_SECRETS])


GITHUB = "gh" + "p_" + "9z8Y7x6W5v4U3t2S1r0Q9p8O7n6M5l4K3j2I"


async def test_every_reason_and_metadata_key_is_redacted_where_it_is_stored_and_echoed(
    start_server: StartServer, db: asyncpg.Connection
) -> None:
    runner = await start_server(
        "memory",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
    )
    secrets = {"db": RUN_SECRET}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        memory = Memory(channel, "sr1/reasons")
        appended = await memory.append(
            entry("x", metadata={f"key-{RUN_SECRET}": "v", f"gh-{GITHUB}": "w"}), secrets=secrets
        )
        (version,) = appended.entries
        assert dict(version.metadata) == {
            "key-[REDACTED:db]": "v",
            "gh-[REDACTED:github_token]": "w",
        }
        revised = await memory.revise(
            version.entry_id, "y", reason=f"rotated {RUN_SECRET}", secrets=secrets
        )
        assert revised.result.changes[0].reason == "rotated [REDACTED:db]"
        forgot = await memory.forget(version.entry_id, reason=f"leaked {GITHUB}")
        assert forgot.result.changes[0].reason == "leaked [REDACTED:github_token]"
        back = await memory.reactivate(version.entry_id, reason=f"back {GITHUB}")
        assert back.result.changes[0].reason == "back [REDACTED:github_token]"
        await memory.forget(version.entry_id)
        preview = await memory.compact(dry_run=True)
        compacted = await memory.compact(
            expected_revision=preview.revision, reason=f"compact {GITHUB}"
        )
        changes = await memory.changes(compacted.revision)
        assert [c.reason for c in changes] == ["compact [REDACTED:github_token]"]
        history = [
            c.reason for r in range(1, compacted.revision + 1) for c in await memory.changes(r)
        ]
        assert all(RUN_SECRET not in r and GITHUB not in r for r in history)
    metrics = scrape(runner.metrics_port)
    # Metadata keys, the revise reason and the reasons of forget, reactivate and compact.
    assert 'ration_memory_redactions_total{detector="github_token"} 4.0' in metrics
    assert 'ration_memory_redactions_total{detector="request_secret"} 2.0' in metrics
    await assert_no_secret_stored(db, [RUN_SECRET, GITHUB])


async def test_an_identifier_holding_a_request_secret_is_refused_without_the_value(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    memory = Memory(memory_channel, f"sr1/{RUN_SECRET}")
    error = await rpc_error(memory.append("x", secrets={"db": RUN_SECRET}))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "VALIDATION_FAILED")
    (violation,) = error.require(error_details_pb2.BadRequest).field_violations
    assert violation.field == "memory_ref"
    assert RUN_SECRET not in error.message
    assert RUN_SECRET not in violation.description
    assert await row_counts(db) == dict.fromkeys(MEMORY_TABLES, 0)


async def test_a_retry_with_another_value_of_the_same_secret_replays_the_first_answer(
    memory_channel: grpc.aio.Channel, db: asyncpg.Connection
) -> None:
    # The fingerprint is of the redacted request, so it cannot confirm a guess of a value.
    memory = Memory(memory_channel, "sr1/fingerprint")
    first = await memory.append(f"pw {RUN_SECRET}", secrets={"db": RUN_SECRET}, rid="rid-1")
    again = await memory.append("pw guess-of-value", secrets={"db": "guess-of-value"}, rid="rid-1")
    assert again == first
    other = await rpc_error(memory.append("pw other", rid="rid-1"))
    assert other.reason == "REQUEST_ID_REUSED"
    (fingerprint,) = await db.fetchval("SELECT array_agg(fingerprint) FROM memory.request_log")
    for guess in (RUN_SECRET, "guess-of-value"):
        assert guess.encode() not in bytes(fingerprint)
