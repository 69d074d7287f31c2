"""Stored replies become the same responses whether read straight or through domain values."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget_service.api import responses as out
from budget_service.api import stored_responses as stored
from budget_service.domain.commands import ConsumeResult, ReserveResult
from budget_service.domain.policy import WINDOW_EPOCH, Dimension, Scope
from budget_service.domain.records import DimensionStatus, PoolKey, ReservationRecord
from budget_service.domain.run_state import BalanceRef, ReservationState, RunState
from budget_service.store import stored_replies as replies
from ration.budget.v1 import budget_pb2 as pb
from tests.support import stored_reply_encoders as encoders

# Years 1 through 9999, as microseconds from the Unix epoch (what a Timestamp holds).
instants = st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999).map(
    lambda us: replies._time(us)
)
amounts = st.dictionaries(st.sampled_from(list(Dimension)), st.integers(0, 10**18))
text = st.text(max_size=12)


@st.composite
def statuses(draw: st.DrawFn) -> DimensionStatus:
    limit = draw(st.none() | st.integers(0, 10**18))
    consumed, held = draw(st.integers(0, 10**18)), draw(st.integers(0, 10**18))
    return DimensionStatus(
        draw(st.sampled_from(list(Dimension))),
        limit,
        consumed,
        held,
        None if limit is None else max(0, limit - consumed - held),
        draw(st.sampled_from(list(Scope))),
        draw(text),
        draw(text),
    )


holds = st.builds(
    ReservationRecord,
    reservation_id=text,
    run_id=text,
    model=text,
    requested=amounts,
    granted=amounts,
    state=st.sampled_from(list(ReservationState)),
    pools=st.lists(
        st.builds(PoolKey, st.builds(BalanceRef, st.sampled_from(list(Scope)), text), instants),
        max_size=3,
    ).map(tuple),
    created_at=instants,
    expires_at=instants,
)
reserve_results = st.builds(ReserveResult, holds, st.lists(statuses(), max_size=4), text)
consume_results = st.builds(
    ConsumeResult,
    st.dictionaries(st.sampled_from(list(Dimension)), st.integers(-5, 10**18)),
    st.lists(statuses(), max_size=4),
    st.sampled_from(list(RunState)),
    st.none() | st.sampled_from(list(ReservationState)),
)


def as_sql_writes(data: bytes) -> bytes:
    """The document as the database functions write it: jsonb text, with spaces."""
    return json.dumps(json.loads(data), separators=(", ", " : ")).encode()


def plain(view: Any, cls: type) -> Any:
    """The domain value the view reads: what the servicer converted before views existed."""
    return cls(*(getattr(view, field.name) for field in dataclasses.fields(cls)))


def same(a: Any, b: Any) -> None:
    assert a == b
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


@settings(max_examples=200)
@given(reserve_results)
def test_a_reserve_reply_reads_straight_into_the_domain_paths_response(
    result: ReserveResult,
) -> None:
    for data in (encoders.reserve_bytes(result), as_sql_writes(encoders.reserve_bytes(result))):
        view = replies.reserve_of(data)
        assert view.reply is not None
        decoded = plain(view, ReserveResult)
        same(stored.reserve(replies.reserve_of(data)), out.reserve(decoded))
        assert stored.reserve(decoded) == out.reserve(decoded)  # built in Python: unchanged
        assert view == decoded
        assert decoded == view


@settings(max_examples=200)
@given(consume_results)
def test_a_consume_reply_reads_straight_into_the_domain_paths_response(
    result: ConsumeResult,
) -> None:
    for data in (encoders.consume_bytes(result), as_sql_writes(encoders.consume_bytes(result))):
        decoded = plain(replies.consume_of(data), ConsumeResult)
        same(stored.consume(replies.consume_of(data)), out.consume(decoded))
        assert all(n > 0 for n in decoded.overrun.values())


@settings(max_examples=200)
@given(holds)
def test_a_release_reply_reads_straight_into_the_domain_paths_response(
    record: ReservationRecord,
) -> None:
    for data in (encoders.release_bytes(record), as_sql_writes(encoders.release_bytes(record))):
        decoded = plain(replies.release_of(data), ReservationRecord)
        expected = pb.ReleaseResponse(reservation=out.reservation(decoded))
        same(stored.release(replies.release_of(data)), expected)
        assert replies.release_of(data) == decoded
        assert hash(replies.release_of(data).pools) == hash(decoded.pools)


def test_a_view_decodes_only_the_fields_read() -> None:
    status = DimensionStatus(Dimension.TOKENS, 10, 4, 3, 3, Scope.RUN, "", "")
    result = ConsumeResult({}, [status], RunState.ACTIVE, ReservationState.CONSUMED)
    view = replies.consume_of(encoders.consume_bytes(result))
    assert view.reservation_state is ReservationState.CONSUMED
    assert "dimensions" not in vars(view)
    assert view.dimensions == [status]
    assert view == result


def test_a_view_is_immutable_like_its_domain_value() -> None:
    none = dict.fromkeys(Dimension, 0)
    hold = ReservationRecord(
        "h", "r", "m", none, none, ReservationState.OPEN, (), WINDOW_EPOCH, WINDOW_EPOCH
    )
    view = replies.release_of(encoders.release_bytes(hold))
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.model = "other"  # type: ignore[misc]
    assert view.model == "m"
    assert view == hold
