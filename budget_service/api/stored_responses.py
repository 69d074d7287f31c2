"""Reserve, Consume and Release results to responses, straight from their stored reply.

The use cases hand back the views of budget_service/store/stored_replies.py, whose `reply` is the
document the request log keeps (the database functions write it; its format is fixed). Their
messages are built from that document directly, without the domain values the store would decode
first; a result built in Python goes through `responses`. Both make the same message
(tests/unit/test_budget_stored_responses.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from budget_service.api import responses as out
from budget_service.domain import commands as cmd
from budget_service.domain.policy import Dimension
from budget_service.domain.records import ReservationRecord
from ration.budget.v1 import budget_pb2 as pb
from servicekit.timestamps import micros_timestamp

# The documents name enum members by value.
DIMENSIONS = {d.value: number for d, number in out.DIMENSIONS.items()}
SCOPES = {s.value: number for s, number in out.SCOPE_NUMBERS.items()}
STATES = {s.value: number for s, number in out.STATES.items()}
HOLD_STATES = {s.value: number for s, number in out.RESERVATION_STATES.items()}
# and list amounts in Dimension order.
if tuple(d.field_name for d in Dimension) != ("tokens", "cost_nanos", "tool_calls", "retries"):
    raise ImportError("stored amounts are read in Dimension order: update _amounts")


def _amounts(values: Sequence[int]) -> pb.Amounts:
    tokens, cost_nanos, tool_calls, retries = values
    return pb.Amounts(tokens=tokens, cost_nanos=cost_nanos, tool_calls=tool_calls, retries=retries)


def _dimensions(rows: Sequence[Sequence[Any]]) -> list[pb.DimensionStatus]:
    found = []
    for dimension, limit, consumed, held, scope, scope_id, clamped_by in rows:
        message = pb.DimensionStatus(
            dimension=DIMENSIONS[dimension],
            consumed=consumed,
            held=held,
            binding_scope=SCOPES[scope],
            binding_scope_id=scope_id,
            clamped_by=clamped_by,
        )
        if limit is not None:
            message.limit = limit
            message.remaining = max(0, limit - consumed - held)
        found.append(message)
    return found


def _hold(doc: Mapping[str, Any]) -> pb.Reservation:
    return pb.Reservation(
        reservation_id=doc["id"],
        run_id=doc["run"],
        model=doc["model"],
        requested=_amounts(doc["requested"]),
        granted=_amounts(doc["granted"]),
        state=HOLD_STATES[doc["state"]],
        expires_at=micros_timestamp(doc["expires_us"]),
        created_at=micros_timestamp(doc["created_us"]),
    )


def reservation(record: ReservationRecord) -> pb.Reservation:
    hold = record.reply
    return out.reservation(record) if hold is None else _hold(hold)


def reserve(result: cmd.ReserveResult) -> pb.ReserveResponse:
    doc = result.reply
    if doc is None:
        return out.reserve(result)
    return pb.ReserveResponse(
        reservation=_hold(doc["hold"]),
        dimensions=_dimensions(doc["dimensions"]),
        advisory_refusal_reason=doc["advisory_reason"],
    )


def consume(result: cmd.ConsumeResult) -> pb.ConsumeResponse:
    doc = result.reply
    if doc is None:
        return out.consume(result)
    hold_state = doc["hold_state"]
    unspecified = pb.RESERVATION_STATE_UNSPECIFIED
    return pb.ConsumeResponse(
        # The domain value keeps only the dimensions that overran.
        overrun=_amounts([n if n > 0 else 0 for n in doc["overrun"]]),
        dimensions=_dimensions(doc["dimensions"]),
        state=STATES[doc["state"]],
        reservation_state=HOLD_STATES[hold_state] if hold_state else unspecified,
    )


def release(record: ReservationRecord) -> pb.ReleaseResponse:
    return pb.ReleaseResponse(reservation=reservation(record))
