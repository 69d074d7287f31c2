"""The stored reply documents of Reserve, Consume, Release, OpenRun and CloseRun as the oracle
writes them: the shape budget.decide_v1 and the lifecycle functions store (and
budget_service/store/stored_replies.py decodes), so a model reply compares byte for byte."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from budget_service.domain.commands import ConsumeResult, ReserveResult
from budget_service.domain.policy import WINDOW_EPOCH, Dimension
from budget_service.domain.records import DimensionStatus, ReservationRecord

_DIMENSIONS = tuple(Dimension)
_MICROSECOND = timedelta(microseconds=1)


def _us(value: datetime) -> int:
    return (value - WINDOW_EPOCH) // _MICROSECOND


def _list(values: Mapping[Dimension, int]) -> list[int]:
    return [int(values.get(d, 0)) for d in _DIMENSIONS]


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
        "model_calls": reservation.model_calls,
    }


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
            *([] if s.window_end is None else [_us(s.window_end)]),
        ]
        for s in statuses
    ]


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


def consume_bytes(result: ConsumeResult) -> bytes:
    return _dumps(
        {
            "overrun": _list(result.overrun),
            "dimensions": statuses_doc(result.dimensions),
            "state": result.state.value,
            "hold_state": result.reservation_state.value if result.reservation_state else None,
        }
    )


def release_bytes(reservation: ReservationRecord) -> bytes:
    return _dumps({"hold": reservation_doc(reservation)})
