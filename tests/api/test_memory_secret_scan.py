"""Issue 17, acceptance 2 (memory): every leak shape through every caller text of every write,
then a scan of every column of every memory table, the DEBUG logs, /metrics and every reply
finds none of them, while a planted canary is found in each place (so the scan cannot pass
vacuously)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Iterable
from typing import Any

import asyncpg
import grpc
from google.protobuf.message import Message

from ration.memory.v1 import memory_pb2
from tests.support.logcapture import JsonLines, debug_logs_fixture  # noqa: F401 (fixture)
from tests.support.memory import MEMORY_TABLES, Memory, entry, pb, request_id
from tests.support.servers import StartServer, scrape

RUN_SECRET = "RunSecret0Horse9Battery"
# Leak shapes of issue 17 item 3, each as (text, its secret part). Assembled at runtime so that
# secret scanners do not flag this file.
SHAPES: dict[str, tuple[str, str]] = {
    "request secret": (f"db {RUN_SECRET}", RUN_SECRET),
    "libpq": ("host=db port=5432 password=" + "LibPq0Secret1", "LibPq0Secret1"),
    "jdbc": ("jdbc:mysql://h/d?user=u&password=" + "JdbcSecret02", "JdbcSecret02"),
    "url query": ("https://x.io/a?password=" + "QuerySecret03", "QuerySecret03"),
    "url password": (
        "postgres://u:" + "UrlPw04/Path05#Frag06?Qry07" + "@db/a",
        "UrlPw04/Path05#Frag06?Qry07",
    ),
    "pem lower": (
        "-----begin private key-----" + "PemLower08xy" + "-----end private key-----",
        "PemLower08xy",
    ),
    "pem 4 dashes": (
        "----BEGIN PRIVATE KEY----" + "PemDashes09xy" + "----END PRIVATE KEY----",
        "PemDashes09xy",
    ),
    "sk upper": ("SK-PROJ-" + "UPPER10KEY11ABCD12EF", "UPPER10KEY11ABCD12EF"),
    "sk full-width": ("\uff53\uff4b\uff0d" + "FullWidth13Key14abcd", "FullWidth13Key14abcd"),
    "sk zero-width": ("sk-" + "ZeroWidth15\u200bKey16abcdef", "ZeroWidth15Key16abcdef"),
    "google": (
        "AIza" + "SyGoogle17abcdefghijklmnopqrstuvwxy",
        "SyGoogle17abcdefghijklmnopqrstuvwxy",
    ),
    "hugging face": (
        "hf_" + "HuggingFaceAbcdefghijklmnopqrstuvw",
        "HuggingFaceAbcdefghijklmnopqrstuvw",
    ),
    "groq": ("gsk_" + "Groq18" * 7, "Groq18" * 7),
    "xai": ("xai-" + "Xai19z" * 7, "Xai19z" * 7),
    "azure": ("api-key: " + "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5", "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"),
    "aws secret": (
        "AwsSecret20/" + "Key21+AbCdEfGhIjKlMnOpQrStUv",
        "AwsSecret20/Key21+AbCdEfGhIjKlMnOpQrStUv",
    ),
    "aws session": ("aws_session_token=" + "FwoGZXIvYXdzSession22", "FwoGZXIvYXdzSession22"),
    "slack webhook": (
        "hooks.slack.com/services/" + "T01AB/B02CD/SlackHook23xyz",
        "T01AB/B02CD/SlackHook23xyz",
    ),
    "bearer": ("Authorization: Bearer " + "BearerToken24xyz", "BearerToken24xyz"),
    "basic": ("authorization: basic " + "QmFzaWMyNTEyMzQ1Ng==", "QmFzaWMyNTEyMzQ1Ng=="),
    "password colon": ("password: " + "ColonSecret26", "ColonSecret26"),
    "pem lines": (
        "-----BEGIN EC PRIVATE KEY-----\n" + "PemLines27abc\n" + "-----END EC PRIVATE KEY-----",
        "PemLines27abc",
    ),
    # Issue 24: shapes stored as written on fa194cd.
    "secret=": ("client_secret=" + "Cs28Value29xyz", "Cs28Value29xyz"),
    "api_key=": ("api_key=" + "Ak30Value31xyz", "Ak30Value31xyz"),
    "token=": ("token=" + "Tk32Value33xyz", "Tk32Value33xyz"),
    "x-api-key": ("x-api-key: " + "Xk34Value35xyz", "Xk34Value35xyz"),
    "gitlab": ("glpat-" + "GitLab36Token37abcde", "GitLab36Token37abcde"),
    "npm": (
        "npm_" + "Npm38Token39abcdefghijklmnopqrstuvwx",
        "Npm38Token39abcdefghijklmnopqrstuvwx",
    ),
    "sendgrid": (
        "SG." + "SendGrid40abcdefghijkl" + "." + "SendGrid41abcdefghijklmnopqrstuvwxyz0123456",
        "SendGrid40abcdefghijkl.SendGrid41abcdefghijklmnopqrstuvwxyz0123456",
    ),
    "twilio": (
        "SK" + "42" + "0123456789abcdef" + "0123456789abcd",
        "420123456789abcdef0123456789abcd",
    ),
    "private_key_id": ('"private_key_id": "' + "43ab" * 10 + '"', "43ab" * 10),
    "homoglyph": ("\u0455k-" + "Homoglyph44Key45abcd", "Homoglyph44Key45abcd"),
    "split by a newline": ("sk-" + "Split46Key" + "\n" + "47abcdefghijk", "47abcdefghijk"),
    "request secret prefix": (f"db {RUN_SECRET[:14]}", RUN_SECRET[:14]),
}
# Kind, tags, metadata keys and reasons are single printable lines: these two shapes can only
# be written through content and metadata values (elsewhere they are refused as bad input).
MULTI_LINE = ["sk zero-width", "pem lines", "sendgrid", "split by a newline"]
CANARY = "PlantedCanary0042"  # no detector matches it: the positive control
# A request id of a shape the logs keep (a UUID): only those are logged as sent.
LOG_CANARY = "1060ca4a-0043-4c0d-8e0f-00000000c0de"
INVISIBLE = re.compile("[\u00ad\u034f\u200b-\u200f\u2060-\u2064\ufeff]")
SECRETS = [memory_pb2.Secret(secret_id="run", value=RUN_SECRET)]


def cores(secret: str) -> list[str]:
    """The secret part and each of its alphanumeric runs (the search index splits words)."""
    return [secret, *re.findall(r"[A-Za-z0-9]{6,}", secret)]


NEEDLES = sorted({c for _, secret in SHAPES.values() for c in cores(secret)})


def forms(text: str) -> tuple[str, ...]:
    folded = INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    return text, text.lower(), folded, folded.lower()


def found_in(text: str, needles: Iterable[str]) -> set[str]:
    seen = forms(text)
    return {n for n in needles if any(n in f or n.lower() in f for f in seen)}


def single_line(text: str, limit: int) -> bool:
    return len(text) <= limit and text.isprintable()


class Transcript:
    """Every reply and every error a client saw during the run, as text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, call: Awaitable[Any]) -> Any:
        try:
            reply = await call
        except grpc.aio.AioRpcError as error:
            self.texts.append(error.details() or "")
            for key, value in error.trailing_metadata() or ():
                raw = value if isinstance(value, bytes) else str(value).encode()
                self.texts.append(f"{key}={raw.decode('utf-8', 'replace')}")
            return None
        if isinstance(reply, Message):
            self.texts.append(reply.SerializeToString().decode("utf-8", "replace"))
        return reply


async def write_everything(memory: Memory, said: Transcript, text: str) -> None:
    """`text` through content, kind, tags, metadata keys and values and every reason."""
    short = single_line(text, 64)
    fields: dict[str, Any] = {
        "kind": text if short else "note",
        "tags": [text] if short else ["tagged"],
        "metadata": {text: text} if short else {"k": text},
    }
    kw = {"metadata": (("x-request-id", request_id()),)}
    appended = await said(
        memory.stub.AppendEntries(
            pb.AppendEntriesRequest(
                request_id=request_id(),
                memory_ref=memory.ref,
                # Two untagged twins: dedupe deactivates one and compaction drops it.
                entries=[
                    entry(f"c {text}", **fields),
                    entry(f"twin {text}"),
                    entry(f"twin {text}"),
                ],
                secrets=SECRETS,
            ),
            **kw,
        )
    )
    assert appended is not None, text
    entry_id = appended.entries[0].entry_id
    reason = f"r {text}" if single_line(text, 200) else "reason"
    revised = await said(
        memory.stub.ReviseEntry(
            pb.ReviseEntryRequest(
                request_id=request_id(),
                memory_ref=memory.ref,
                entry_id=entry_id,
                entry=entry(f"v2 {text}", **fields),
                secrets=SECRETS,
                reason=reason,
            )
        )
    )
    assert revised is not None, text
    run = {"run": RUN_SECRET}
    assert await said(memory.forget(entry_id, reason=reason, secrets=run)) is not None
    assert await said(memory.reactivate(entry_id, reason=reason, secrets=run)) is not None
    assert await said(memory.dedupe()) is not None
    preview = await said(memory.compact(dry_run=True, reason=reason, secrets=run))
    compacted = await said(
        memory.compact(expected_revision=preview.revision, reason=reason, secrets=run)
    )
    assert list(compacted.entry_ids) == list(preview.entry_ids)
    assert len(compacted.entry_ids) == 1  # the deactivated twin
    # A write naming the request secret in an identifier is refused (and scanned too).
    refused = pb.AppendEntriesRequest(
        request_id=f"rid-{RUN_SECRET}",
        memory_ref=f"{memory.ref}/{RUN_SECRET}",
        entries=[entry("x")],
        secrets=SECRETS,
    )
    assert await said(memory.stub.AppendEntries(refused)) is None


async def read_everything(memory: Memory, said: Transcript) -> None:
    head = await said(memory.stub.GetCapacity(pb.GetCapacityRequest(memory_ref=memory.ref)))
    revision = head.capacity.revision
    await said(memory.stub.ListRevisions(pb.ListRevisionsRequest(memory_ref=memory.ref)))
    for number in range(1, revision + 1):
        changes = await said(
            memory.stub.GetChanges(pb.GetChangesRequest(memory_ref=memory.ref, revision=number))
        )
        for change in changes.changes:
            if change.to_entry_version_id:
                await said(
                    memory.stub.GetEntryVersion(
                        pb.GetEntryVersionRequest(
                            memory_ref=memory.ref, entry_version_id=change.to_entry_version_id
                        )
                    )
                )
    await said(memory.stub.ListMemory(pb.ListMemoryRequest(memory_ref=memory.ref)))
    await said(
        memory.stub.SearchMemory(
            pb.SearchMemoryRequest(
                memory_ref=memory.ref, mode=memory_pb2.SEARCH_MODE_FILTER, query="x"
            )
        )
    )


async def table_texts(db: asyncpg.Connection) -> dict[str, str]:
    """Every table of the memory schema as text: rows (jsonb and tsvector as text) and every
    bytea column decoded as UTF-8."""
    tables = [
        r["table_name"]
        for r in await db.fetch(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'memory' AND table_type = 'BASE TABLE'"
        )
    ]
    assert set(MEMORY_TABLES) <= set(tables)
    texts = {}
    for table in tables:
        rows = await db.fetchval(
            f"SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM memory.\"{table}\" t"
        )
        binary = [
            r["column_name"]
            for r in await db.fetch(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'memory' AND table_name = $1 AND data_type = 'bytea'",
                table,
            )
        ]
        decoded = []
        for column in binary:
            for row in await db.fetch(f'SELECT "{column}" AS v FROM memory."{table}"'):
                if row["v"] is not None:
                    decoded.append(bytes(row["v"]).decode("utf-8", "replace"))
        texts[f"memory.{table}"] = rows + "\n" + "\n".join(decoded)
    return texts


async def test_no_secret_shape_is_stored_logged_exposed_or_echoed_anywhere(
    start_server: StartServer, db: asyncpg.Connection, debug_logs: JsonLines
) -> None:
    runner = await start_server(
        "memory",
        RATION_LOG_LEVEL="DEBUG",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS="0",
    )
    assert [name for name, (text, _) in SHAPES.items() if not single_line(text, 64)] == MULTI_LINE
    said = Transcript()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        for index, (text, _) in enumerate(SHAPES.values()):
            memory = Memory(channel, f"scan/{index}")
            await write_everything(memory, said, text)
            await read_everything(memory, said)
        # The positive control: a canary stored as plain content, one logged as a request id.
        planted = Memory(channel, "scan/planted")
        await said(
            planted.stub.AppendEntries(
                pb.AppendEntriesRequest(
                    request_id=request_id(), memory_ref=planted.ref, entries=[entry(CANARY)]
                ),
                metadata=(("x-request-id", LOG_CANARY),),
            )
        )
        await read_everything(planted, said)
        metrics = scrape(runner.metrics_port)

    logs = "\n".join(debug_logs.lines)
    sources = {**await table_texts(db), "logs": logs, "metrics": metrics}
    sources["replies"] = "\n".join(said.texts)

    # The scan sees what it is meant to see.
    for source in ("memory.entry_versions", "memory.request_log", "replies"):
        assert CANARY in found_in(sources[source], [CANARY]), source
    assert found_in(sources["logs"], [LOG_CANARY]) == {LOG_CANARY}
    assert '"level": "debug"' in logs  # DEBUG lines were captured
    assert found_in(metrics, ["AppendEntries"]) == {"AppendEntries"}
    assert "[REDACTED:run]" in sources["memory.changes"]
    assert all("[REDACTED:" in sources[s] for s in ("memory.entry_versions", "replies"))

    leaks = {name: found_in(text, NEEDLES) for name, text in sources.items()}
    print({name: sorted(found) for name, found in leaks.items() if found})
    assert {name: sorted(found) for name, found in leaks.items() if found} == {}
