"""Stored replies of Reserve, Consume and Release: the JSON documents the request log keeps.

budget.decide_v1 (migration 0006) builds them in SQL; the encoders here write the same shape
(the test oracle uses them). A reply is decoded back into the
domain result for the servicer, fresh or replayed alike. Dimensions are arrays in Dimension
order; times are microseconds since the Unix epoch (exact, like the database's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from budget_service.domain.commands import ConsumeResult, ReserveResult
from budget_service.domain.policy import WINDOW_EPOCH, Dimension, Scope
from budget_service.domain.records import DimensionStatus, PoolKey, ReservationRecord
from budget_service.domain.run_state import BalanceRef, ReservationState, RunState

_DIMENSIONS = tuple(Dimension)
_MICROSECOND = timedelta(microseconds=1)
# Enum lookups by value through dicts: calling the enum class is several times slower.
_DIMENSION = {d.value: d for d in Dimension}
_SCOPE = {s.value: s for s in Scope}
_RESERVATION_STATE = {s.value: s for s in ReservationState}


def _us(value: datetime) -> int:
    return (value - WINDOW_EPOCH) // _MICROSECOND


def _time(us: int) -> datetime:
    return WINDOW_EPOCH + timedelta(microseconds=us)


def _list(values: Mapping[Dimension, int]) -> list[int]:
    return [int(values.get(d, 0)) for d in _DIMENSIONS]


def _amounts(values: Sequence[int]) -> dict[Dimension, int]:
    return dict(zip(_DIMENSIONS, values, strict=True))


def reservation_doc(reservation: ReservationRecord) -> dict[str, Any]:
    return {
        "id": reservation.reservation_id,
        "run": reservation.run_id,
        "model": reservation.model,
        "requested": _list(reservation.requested),
        "granted": _list(reservation.granted),
        "state": reservation.state.value,
        "pools": [
            [k.ref.scope.value, k.ref.scope_id, _us(k.window_start)] for k in reservation.pools
        ],
        "created_us": _us(reservation.created_at),
        "expires_us": _us(reservation.expires_at),
    }


def reservation_of(doc: Mapping[str, Any]) -> ReservationRecord:
    return ReservationRecord(
        reservation_id=doc["id"],
        run_id=doc["run"],
        model=doc["model"],
        requested=_amounts(doc["requested"]),
        granted=_amounts(doc["granted"]),
        state=_RESERVATION_STATE[doc["state"]],
        pools=tuple(PoolKey(BalanceRef(_SCOPE[s], i), _time(w)) for s, i, w in doc["pools"]),
        created_at=_time(doc["created_us"]),
        expires_at=_time(doc["expires_us"]),
    )


def statuses_doc(statuses: Sequence[DimensionStatus]) -> list[list[Any]]:
    return [
        [
            s.dimension.value,
            s.limit,
            s.consumed,
            s.held,
            s.binding_scope.value,
            s.binding_scope_id,
            s.clamped_by,
        ]
        for s in statuses
    ]


def statuses_of(doc: Sequence[Sequence[Any]]) -> list[DimensionStatus]:
    found = []
    for dimension, limit, consumed, held, scope, scope_id, clamped_by in doc:
        remaining = None if limit is None else max(0, limit - consumed - held)
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
            )
        )
    return found


def _dumps(doc: Mapping[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, no whitespace). Replies are decoded by key, so rows stored
    before keys were sorted, and the SQL path's jsonb text, replay the same."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def reserve_bytes(result: ReserveResult) -> bytes:
    return _dumps(
        {
            "hold": reservation_doc(result.reservation),
            "dimensions": statuses_doc(result.dimensions),
            "advisory_reason": result.advisory_refusal_reason,
        }
    )


def reserve_of(data: bytes) -> ReserveResult:
    doc = json.loads(data)
    return ReserveResult(
        reservation_of(doc["hold"]), statuses_of(doc["dimensions"]), doc["advisory_reason"]
    )


def consume_bytes(result: ConsumeResult) -> bytes:
    return _dumps(
        {
            "overrun": _list(result.overrun),
            "dimensions": statuses_doc(result.dimensions),
            "state": result.state.value,
            "hold_state": result.reservation_state.value if result.reservation_state else None,
        }
    )


def consume_of(data: bytes) -> ConsumeResult:
    doc = json.loads(data)
    overrun = {d: n for d, n in _amounts(doc["overrun"]).items() if n > 0}
    reservation_state = doc["hold_state"]
    return ConsumeResult(
        overrun,
        statuses_of(doc["dimensions"]),
        RunState(doc["state"]),
        _RESERVATION_STATE[reservation_state] if reservation_state else None,
    )


def release_bytes(reservation: ReservationRecord) -> bytes:
    return _dumps({"hold": reservation_doc(reservation)})


def release_of(data: bytes) -> ReservationRecord:
    return reservation_of(json.loads(data)["hold"])
