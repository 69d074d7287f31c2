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
from servicekit.timestamps import set_micros

# The documents name enum members by value.
DIMENSIONS = {d.value: number for d, number in out.DIMENSIONS.items()}
SCOPES = {s.value: number for s, number in out.SCOPE_NUMBERS.items()}
STATES = {s.value: number for s, number in out.STATES.items()}
HOLD_STATES = {s.value: number for s, number in out.RESERVATION_STATES.items()}
RESERVATION_UNSPECIFIED = pb.RESERVATION_STATE_UNSPECIFIED
# and list amounts in Dimension order.
if tuple(d.field_name for d in Dimension) != ("tokens", "cost_nanos", "tool_calls", "retries"):
    raise ImportError("stored amounts are listed in Dimension order: update _amounts")


# Each message is filled in place: on this protobuf runtime (upb) that is about a third
# cheaper than building the submessages first and handing them to the constructor.
def _amounts(message: pb.Amounts, values: Sequence[int]) -> None:
    message.tokens, message.cost_nanos, message.tool_calls, message.retries = values


def _dimensions(
    message: pb.ReserveResponse | pb.ConsumeResponse, rows: Sequence[Sequence[Any]]
) -> None:
    add = message.dimensions.add
    for dimension, limit, consumed, held, scope, scope_id, clamped_by, *more in rows:
        status = add(
            dimension=DIMENSIONS[dimension],
            consumed=consumed,
            held=held,
            binding_scope=SCOPES[scope],
            binding_scope_id=scope_id,
            clamped_by=clamped_by,
        )
        if limit is not None:
            status.limit = limit
            status.remaining = max(0, limit - consumed - held)
        if more and more[0] is not None:  # a windowed pool's window end
            set_micros(status.window_end, more[0])


def _hold(message: pb.Reservation, doc: Mapping[str, Any]) -> None:
    message.reservation_id = doc["id"]
    message.run_id = doc["run"]
    message.model = doc["model"]
    _amounts(message.requested, doc["requested"])
    _amounts(message.granted, doc["granted"])
    message.state = HOLD_STATES[doc["state"]]
    set_micros(message.expires_at, doc["expires_us"])
    set_micros(message.created_at, doc["created_us"])


def reservation(record: ReservationRecord) -> pb.Reservation:
    hold = record.reply
    if hold is None:
        return out.reservation(record)
    message = pb.Reservation()
    _hold(message, hold)
    return message


def reserve(result: cmd.ReserveResult) -> pb.ReserveResponse:
    doc = result.reply
    if doc is None:
        return out.reserve(result)
    message = pb.ReserveResponse(advisory_refusal_reason=doc["advisory_reason"])
    _hold(message.reservation, doc["hold"])
    _dimensions(message, doc["dimensions"])
    return message


def consume(result: cmd.ConsumeResult) -> pb.ConsumeResponse:
    doc = result.reply
    if doc is None:
        return out.consume(result)
    hold_state = doc["hold_state"]
    message = pb.ConsumeResponse(
        state=STATES[doc["state"]],
        reservation_state=HOLD_STATES[hold_state] if hold_state else RESERVATION_UNSPECIFIED,
    )
    # The domain value keeps only the dimensions that overran.
    _amounts(message.overrun, [n if n > 0 else 0 for n in doc["overrun"]])
    _dimensions(message, doc["dimensions"])
    return message


def release(record: ReservationRecord) -> pb.ReleaseResponse:
    hold = record.reply
    if hold is None:
        return pb.ReleaseResponse(reservation=out.reservation(record))
    message = pb.ReleaseResponse()
    _hold(message.reservation, hold)
    return message
