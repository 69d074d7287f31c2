"""Stored replies of Reserve, Consume and Release: the JSON documents the request log keeps.

budget.decide_v2 (store/functions/reply_v2.sql) builds them in SQL; the test oracle's encoders of
the same shape are in tests/support/stored_reply_encoders.py. A reply is decoded back into the
domain result for the servicer, fresh or replayed alike: a view whose fields are decoded when
first read, and whose `reply` is the document itself, which the API converts straight into its
response (budget_service/api/responses.py), so the hot path builds no domain value it does not
read.
Dimensions are arrays in Dimension order; times are microseconds since the Unix epoch (exact,
like the database's).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from budget_service.domain.commands import ConsumeResult, ReserveResult
from budget_service.domain.policy import WINDOW_EPOCH, AnyDimension, Dimension, PoolDimension, Scope
from budget_service.domain.records import DimensionStatus, PoolKey, ReservationRecord
from budget_service.domain.run_state import BalanceRef, ReservationState, RunState

_DIMENSIONS = tuple(Dimension)
_MICROSECOND = timedelta(microseconds=1)
# Enum lookups by value through dicts: calling the enum class is several times slower.
_DIMENSION: dict[str, AnyDimension] = {d.value: d for d in (*Dimension, *PoolDimension)}
_SCOPE = {s.value: s for s in Scope}
_RESERVATION_STATE = {s.value: s for s in ReservationState}


def _time(us: int) -> datetime:
    return WINDOW_EPOCH + timedelta(microseconds=us)


def _amounts(values: Sequence[int]) -> dict[Dimension, int]:
    return dict(zip(_DIMENSIONS, values, strict=True))


def statuses_of(doc: Sequence[Sequence[Any]]) -> list[DimensionStatus]:
    """Rows [dimension, limit, consumed, held, scope, scope_id, clamped_by(, window_end_us)]:
    a pool's rows carry when its window ends (rows stored before they did have 7 entries)."""
    found = []
    for dimension, limit, consumed, held, scope, scope_id, clamped_by, *more in doc:
        remaining = None if limit is None else max(0, limit - consumed - held)
        end_us = more[0] if more else None
        found.append(
            DimensionStatus(
                _DIMENSION[dimension],
                limit,
                consumed,
                held,
                remaining,
                _SCOPE[scope],
                scope_id,
                clamped_by,
                None if end_us is None else _time(end_us),
            )
        )
    return found


Decoder = Callable[[Mapping[str, Any]], Any]


class _StoredView:
    """A domain value read from a stored reply document: each field is decoded from `reply`
    when first read, then kept. Equal to (and hashed like) the plain value of its base class
    with the same fields; immutable like it."""

    _base: ClassVar[type]
    _decoders: ClassVar[Mapping[str, Decoder]]  # one per field of _base
    _doc: Mapping[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = [f.name for f in dataclasses.fields(cls._base)]
        assert list(cls._decoders) == names, (cls.__name__, names)

    def __init__(self, doc: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_doc", doc)

    @property
    def reply(self) -> Mapping[str, Any]:
        return self._doc

    def __getattr__(self, name: str) -> Any:
        # Only called for an attribute not set yet: a field not decoded so far.
        decode = type(self)._decoders.get(name)
        if decode is None:
            raise AttributeError(name)
        value = decode(self._doc)
        object.__setattr__(self, name, value)
        return value

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._decoders)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._base):
            return NotImplemented
        return self._fields() == tuple(getattr(other, name) for name in self._decoders)

    def __hash__(self) -> int:
        return hash(self._fields())


def _pools(doc: Mapping[str, Any]) -> tuple[PoolKey, ...]:
    return tuple(PoolKey(BalanceRef(_SCOPE[s], i), _time(w)) for s, i, w in doc["pools"])


class StoredReservation(_StoredView, ReservationRecord):
    """A hold as its reply document stores it (`reply` is the hold's document)."""

    _base = ReservationRecord
    _decoders = {
        "reservation_id": lambda doc: doc["id"],
        "run_id": lambda doc: doc["run"],
        "model": lambda doc: doc["model"],
        "requested": lambda doc: _amounts(doc["requested"]),
        "granted": lambda doc: _amounts(doc["granted"]),
        "state": lambda doc: _RESERVATION_STATE[doc["state"]],
        "pools": _pools,
        "created_at": lambda doc: _time(doc["created_us"]),
        "expires_at": lambda doc: _time(doc["expires_us"]),
        # Replies stored before migration 0010 held no model calls.
        "model_calls": lambda doc: doc.get("model_calls", 0),
    }


class StoredReserve(_StoredView, ReserveResult):
    """Reserve's reply as stored."""

    _base = ReserveResult
    _decoders = {
        "reservation": lambda doc: StoredReservation(doc["hold"]),
        "dimensions": lambda doc: statuses_of(doc["dimensions"]),
        "advisory_refusal_reason": lambda doc: doc["advisory_reason"],
    }


def _overrun(doc: Mapping[str, Any]) -> dict[Dimension, int]:
    return {d: n for d, n in _amounts(doc["overrun"]).items() if n > 0}


def _hold_state(doc: Mapping[str, Any]) -> ReservationState | None:
    state = doc["hold_state"]
    return _RESERVATION_STATE[state] if state else None


class StoredConsume(_StoredView, ConsumeResult):
    """Consume's reply as stored: the use case reads its overrun and hold state; the
    dimensions are decoded only if something reads them."""

    _base = ConsumeResult
    _decoders = {
        "overrun": _overrun,
        "dimensions": lambda doc: statuses_of(doc["dimensions"]),
        "state": lambda doc: RunState(doc["state"]),
        "reservation_state": _hold_state,
    }


def reserve_of(data: bytes) -> ReserveResult:
    return StoredReserve(json.loads(data))


def consume_of(data: bytes) -> ConsumeResult:
    return StoredConsume(json.loads(data))


def release_of(data: bytes) -> ReservationRecord:
    return StoredReservation(json.loads(data)["hold"])
