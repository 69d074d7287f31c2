"""Fingerprints and stored replies are canonical: independent of field and map order."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from budget_service.domain.commands import ConsumeResult, OpenRun
from budget_service.domain.fingerprints import (
    canonical_json,
    is_same_open,
    legacy_open_run_fingerprint,
    open_run_fingerprint,
)
from budget_service.domain.policy import BudgetPolicy, Dimension, OnExhaustion
from budget_service.domain.run_state import ReservationState, RunState
from budget_service.store import stored_replies as replies
from memory_service.api.requests import append_command
from memory_service.domain.write_redaction import canonical_json as memory_canonical_json
from ration.memory.v1 import memory_service_pb2
from tests.support import stored_reply_encoders as encoders


def open_run(**policy: object) -> OpenRun:
    return OpenRun("r", "p", "w", "a", BudgetPolicy(**policy))  # type: ignore[arg-type]


def test_canonical_json_ignores_map_order_and_has_no_whitespace() -> None:
    forward = {Dimension.TOKENS: 1, Dimension.COST: 2, "z": [1, 2]}
    backward = {"z": [1, 2], Dimension.COST: 2, Dimension.TOKENS: 1}
    assert canonical_json(forward) == canonical_json(backward)
    assert b" " not in canonical_json(forward)


def test_a_field_added_with_its_default_leaves_the_encoding_as_it_was() -> None:
    @dataclass(frozen=True)
    class Before:
        limit: int

    @dataclass(frozen=True)
    class After:
        limit: int
        window: str = "none"

    assert canonical_json(Before(5)) == canonical_json(After(5))
    assert canonical_json(Before(5)) != canonical_json(After(5, "day"))


def test_the_open_run_fingerprint_is_canonical_and_not_a_repr() -> None:
    command = open_run(max_tokens=10, on_exhaustion=OnExhaustion.INTERRUPT)
    assert open_run_fingerprint(command) == open_run_fingerprint(
        open_run(on_exhaustion=OnExhaustion.INTERRUPT, max_tokens=10)
    )
    assert open_run_fingerprint(command) != open_run_fingerprint(open_run(max_tokens=11))
    as_repr = hashlib.sha256(repr((("p", "w", "a"), command.policy)).encode()).digest()
    assert open_run_fingerprint(command) != as_repr


def test_a_run_opened_under_the_repr_fingerprint_still_reads_as_the_same_open() -> None:
    command = open_run(max_tokens=10)
    assert is_same_open(legacy_open_run_fingerprint(command), command)
    assert is_same_open(open_run_fingerprint(command), command)
    assert not is_same_open(legacy_open_run_fingerprint(open_run(max_tokens=9)), command)


def append_request(metadata: list[tuple[str, str]]) -> memory_service_pb2.AppendEntriesRequest:
    request = memory_service_pb2.AppendEntriesRequest(request_id="r", memory_ref="m")
    entry = request.entries.add(kind="note", content="c")
    for key, value in metadata:
        entry.metadata[key] = value
    return request


def test_the_memory_write_fingerprint_ignores_metadata_order() -> None:
    pairs = [("a", "1"), ("b", "2"), ("c", "3")]
    forward = memory_canonical_json(append_command(append_request(pairs)))
    backward = memory_canonical_json(append_command(append_request(pairs[::-1])))
    assert forward == backward
    assert b" " not in forward


def test_a_stored_budget_reply_is_canonical_json() -> None:
    result = ConsumeResult({Dimension.TOKENS: 3}, [], RunState.ACTIVE, ReservationState.CONSUMED)
    data = encoders.consume_bytes(result)
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    assert replies.consume_of(data) == replies.consume_of(
        json.dumps(dict(reversed(json.loads(data).items()))).encode()
    )
