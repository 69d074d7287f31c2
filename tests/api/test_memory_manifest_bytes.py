"""Acceptance 1: reported manifest_bytes equal the RFC 8785 length of the materialised content.

Random operation sequences run through the real server and Postgres. An independent in-test
model predicts every revision's items and changes; for the head after each step and for every
past revision at the end, GetCapacity's manifest_bytes must equal the length of the model's
canonical bytes, and the manifest rebuilt from the store (items valid at R + R's changes) must
encode to exactly those bytes.
"""

from __future__ import annotations

import hashlib
import unicodedata
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_service.domain.manifest import canonical_content
from memory_service.store import reads as store_reads
from ration.memory.v1 import memory_pb2 as m
from ration.memory.v1 import memory_service_pb2 as ms
from servicekit.auth import DEV_TENANT
from tests.support.errors import rpc_error
from tests.support.manifests import canonical_document, materialise
from tests.support.memory import Memory, entry
from tests.support.servers import StartServer

MIN_TOMBSTONE_REVISIONS = 2
CONTENTS = ("alpha", "beta", "alpha", "Cafe\u0301 au lait", "party 🎉", "beta")
REASONS = ("", "why", "Cafe\u0301", "x" * 40)


@dataclass
class Item:
    entry_id: str
    entry_version_id: str
    entry_content_hash: str
    state: str
    tagged: bool
    last_state_change: int
    created_in_revision: int

    def manifest(self) -> dict[str, str]:
        return {
            "entry_id": self.entry_id,
            "entry_version_id": self.entry_version_id,
            "entry_content_hash": self.entry_content_hash,
            "state": self.state,
        }


@dataclass
class Model:
    """What the memory must be, derived from the documented rules only."""

    items: dict[str, Item] = field(default_factory=dict)
    known: list[str] = field(default_factory=list)  # every id ever added, compacted ones too
    head: int = 0
    snapshots: dict[int, bytes] = field(default_factory=dict)

    def commit(self, changes: list[dict[str, Any]]) -> None:
        self.head += 1
        items = [i.manifest() for i in self.items.values()]
        self.snapshots[self.head] = canonical_document(items, changes)


def digest(content: str) -> str:
    return hashlib.sha256(unicodedata.normalize("NFC", content).encode()).hexdigest()


def change(
    op: str, item: Item, before: str | None, after: str | None, reason: str
) -> dict[str, Any]:
    return {
        "entry_id": item.entry_id,
        "op": op,
        "from_entry_version_id": before,
        "to_entry_version_id": after,
        "reason": reason or None,
    }


def reported(changes: Any) -> list[tuple[str, str, str, str, str]]:
    """A response's changes, comparable with the model's (op names as the store spells them)."""
    names = {1: "add", 2: "revise", 3: "deactivate", 4: "reactivate", 5: "compact"}
    return sorted(
        (c.entry_id, names[c.op], c.from_entry_version_id, c.to_entry_version_id, c.reason)
        for c in changes
    )


def expected(changes: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    return sorted(
        (
            c["entry_id"],
            c["op"],
            c["from_entry_version_id"] or "",
            c["to_entry_version_id"] or "",
            c["reason"] or "",
        )
        for c in changes
    )


async def step(memory: Memory, model: Model, op: tuple[Any, ...]) -> None:
    kind = op[0]
    pick = (
        [model.known[i % len(model.known)] for i in op[1]]
        if model.known and kind in ("forget", "reactivate", "revise")
        else []
    )
    pick = list(dict.fromkeys(pick))
    result: m.WriteResult | ms.CompactMemoryResponse  # what the write answered about the head
    if kind == "append":
        contents = [CONTENTS[i] for i in op[1]]
        tagged = op[2]
        appended = await memory.append(
            *(entry(c, tags=["keep"] if tagged else []) for c in contents),
            expected_revision=model.head,
        )
        result = appended.result
        revision = model.head + 1
        changes = []
        for sent, stored in zip(contents, appended.entries, strict=True):
            assert stored.content_hash == digest(sent)
            item = Item(
                stored.entry_id,
                stored.entry_version_id,
                digest(sent),
                "active",
                tagged,
                revision,
                revision,
            )
            model.items[item.entry_id] = item
            model.known.append(item.entry_id)
            changes.append(change("add", item, None, item.entry_version_id, ""))
    elif not pick and kind != "dedupe" and kind != "compact":
        return
    elif kind == "revise":
        target = model.items.get(pick[0])
        content, reason = CONTENTS[op[2]], REASONS[op[3]]
        if target is None or target.state != "active":
            error = await rpc_error(memory.revise(pick[0], content, reason=reason))
            assert error.reason == "ENTRY_NOT_FOUND"
            return
        revised = await memory.revise(pick[0], content, reason=reason, expected_revision=model.head)
        result = revised.result
        old = target.entry_version_id
        target.entry_version_id = revised.entry.entry_version_id
        target.entry_content_hash = digest(content)
        target.created_in_revision = model.head + 1
        target.tagged = False  # tags belong to the version; the revision sent none
        changes = [change("revise", target, old, target.entry_version_id, reason)]
    elif kind in ("forget", "reactivate"):
        reason = REASONS[op[2]]
        call = memory.forget if kind == "forget" else memory.reactivate
        if any(entry_id not in model.items for entry_id in pick):
            assert (await rpc_error(call(*pick, reason=reason))).reason == "ENTRY_NOT_FOUND"
            return
        result = (await call(*pick, reason=reason)).result
        goal = "inactive" if kind == "forget" else "active"
        moving = [model.items[i] for i in pick if model.items[i].state != goal]
        op_name = "deactivate" if kind == "forget" else "reactivate"
        changes = []
        for item in moving:
            item.state, item.last_state_change = goal, model.head + 1
            changes.append(
                change(op_name, item, item.entry_version_id, item.entry_version_id, reason)
            )
    elif kind == "dedupe":
        result = (await memory.dedupe()).result
        keep: dict[str, Item] = {}
        changes = []
        active = [i for i in model.items.values() if i.state == "active"]
        for item in sorted(active, key=lambda i: (i.created_in_revision, i.entry_id.encode())):
            if item.entry_content_hash in keep:
                item.state, item.last_state_change = "inactive", model.head + 1
                changes.append(
                    change(
                        "deactivate", item, item.entry_version_id, item.entry_version_id, "dedupe"
                    )
                )
            else:
                keep[item.entry_content_hash] = item
    else:  # compact
        limit, reason = op[1], REASONS[op[2]]
        preview = await memory.compact(dry_run=True, limit=limit, reason=reason)
        compacted = await memory.compact(limit=limit, reason=reason, expected_revision=model.head)
        result = compacted
        eligible = sorted(
            (
                i
                for i in model.items.values()
                if i.state == "inactive"
                and not i.tagged
                and i.last_state_change <= model.head - MIN_TOMBSTONE_REVISIONS
            ),
            key=lambda i: i.entry_id.encode(),
        )
        dropped = eligible[:limit] if limit else eligible
        assert list(compacted.entry_ids) == [i.entry_id for i in dropped] == list(preview.entry_ids)
        assert compacted.reclaimed_bytes == preview.reclaimed_bytes
        before = model.snapshots.get(model.head, b"")
        changes = [change("compact", i, i.entry_version_id, None, reason) for i in dropped]
        for item in dropped:
            del model.items[item.entry_id]
        if changes:
            after = canonical_document([i.manifest() for i in model.items.values()], changes)
            assert compacted.reclaimed_bytes == len(before) - len(after)
        else:
            assert compacted.reclaimed_bytes == 0
    if changes:
        model.commit(changes)
    assert result.revision == model.head, "a no-op must create no revision"
    if hasattr(result, "changes"):
        assert reported(result.changes) == expected(changes)
    assert result.capacity.manifest_bytes == len(model.snapshots[model.head])


entry_picks = st.lists(st.integers(0, 40), min_size=1, max_size=3)
appends = st.tuples(
    st.just("append"),
    st.lists(st.integers(0, len(CONTENTS) - 1), min_size=1, max_size=4),
    st.booleans(),
)
operations = st.one_of(
    appends,
    st.tuples(
        st.just("revise"),
        entry_picks,
        st.integers(0, len(CONTENTS) - 1),
        st.integers(0, len(REASONS) - 1),
    ),
    st.tuples(st.just("forget"), entry_picks, st.integers(0, len(REASONS) - 1)),
    st.tuples(st.just("reactivate"), entry_picks, st.integers(0, len(REASONS) - 1)),
    st.tuples(st.just("dedupe")),
    st.tuples(st.just("compact"), st.integers(0, 2), st.integers(0, len(REASONS) - 1)),
)
# Every memory starts with an append: writes other than append need the memory to exist.
sequences = st.tuples(appends, st.lists(operations, max_size=9))


@pytest.fixture
async def compacting_channel(start_server: StartServer) -> AsyncIterator[grpc.aio.Channel]:
    runner = await start_server(
        "memory",
        RATION_MEMORY_COMPACTION_ENABLED="true",
        RATION_MEMORY_MIN_TOMBSTONE_REVISIONS=str(MIN_TOMBSTONE_REVISIONS),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=sequences)
async def test_manifest_bytes_equal_materialised_rfc8785_length_at_head_and_every_revision(
    compacting_channel: grpc.aio.Channel,
    db: asyncpg.Connection,
    sequence: tuple[tuple[Any, ...], list[tuple[Any, ...]]],
) -> None:
    memory = Memory(compacting_channel, f"prop/{uuid.uuid4().hex}")
    model = Model()
    first, rest = sequence
    for op in (first, *rest):
        await step(memory, model, op)
    assert await memory.head() == model.head
    found = await store_reads.find_head(db, DEV_TENANT, memory.ref)
    assert found is not None
    key, _ = found
    for revision in range(1, model.head + 1):
        capacity = await memory.capacity(revision)
        expected_bytes = model.snapshots[revision]
        assert capacity.manifest_bytes == len(expected_bytes)
        assert await materialise(db, memory.ref, revision) == expected_bytes
        # The store's own reconstruction, encoded by the service's encoder, agrees as well.
        items = await store_reads.manifest_at(db, key, revision)
        changes = await store_reads.changes_of(db, key, revision)
        assert canonical_content(items, changes) == expected_bytes
