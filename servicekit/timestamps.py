"""google.protobuf.Timestamp <-> aware datetime, exact, and checked where a caller sent it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from servicekit.errors import FieldViolation

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The range google.protobuf.Timestamp defines (0001-01-01 through 9999-12-31, UTC), which is
# also what a datetime holds; a request outside it is bad input, not a server error.
MIN_SECONDS = -62_135_596_800
MAX_SECONDS = 253_402_300_799
MAX_NANOS = 999_999_999


def timestamp(value: datetime) -> Timestamp:
    """An aware datetime as a Timestamp; integer arithmetic, so it is exact (and about three
    times cheaper than Timestamp.FromDatetime, which goes through time tuples)."""
    seconds, micros = divmod((value - _EPOCH) // _MICROSECOND, 1_000_000)
    return Timestamp(seconds=seconds, nanos=micros * 1000)


def set_micros(message: Timestamp, micros: int) -> None:
    """Sets a Timestamp (typically a field of a message being built) to an instant given in
    microseconds since the Unix epoch: what `timestamp` makes of the same instant."""
    seconds, rest = divmod(micros, 1_000_000)
    message.seconds = seconds
    message.nanos = rest * 1000


def timestamp_violation(value: Timestamp, field: str) -> FieldViolation | None:
    """Why a request's Timestamp is not a valid instant, or None when it is."""
    if not MIN_SECONDS <= value.seconds <= MAX_SECONDS:
        return FieldViolation(field, "seconds must lie in years 1 through 9999 (UTC)")
    if not 0 <= value.nanos <= MAX_NANOS:
        return FieldViolation(field, f"nanos must be in 0..{MAX_NANOS}")
    return None


def to_datetime(value: Timestamp) -> datetime:
    """A valid Timestamp (see timestamp_violation) as an aware UTC datetime, to the microsecond."""
    return value.ToDatetime(tzinfo=UTC)
