"""Webhook alerts of `ration notify`: which events, the body a receiver gets, its signature."""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from budget_service.domain import events as ev

# What a webhook gets unless its configuration chooses: the events someone may have to act on.
# An INTERRUPTED run shows as its cap.breached (only a FAILED run adds run.failed).
DEFAULT_EVENT_TYPES = (
    ev.ThresholdCrossed.event_type,
    ev.BudgetExhausted.event_type,
    ev.CapBreached.event_type,
    ev.RunFailed.event_type,
)
# `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, signed anew at each attempt: a
# receiver refuses a t older than REPLAY_WINDOW_SECONDS, so a captured POST cannot be replayed
# later (Stripe's scheme).
TIMESTAMP_SIGNATURE_HEADER = "Ration-Signature"
REPLAY_WINDOW_SECONDS = 300
# Deprecated (removed in the next release): `sha256=<hex>` over the body alone, which a
# captured POST carries forever.
SIGNATURE_HEADER = "X-Ration-Signature"
DELIVERY_HEADER = "X-Ration-Delivery"
EVENT_HEADER = "X-Ration-Event"
# Delivery ids are UUIDv5 in this namespace (a fixed, random one), of tenant, webhook and event.
_DELIVERY_NAMESPACE = uuid.UUID("6f1d3f3e-8c4a-4a57-9a59-3d6a8d0b7c21")


class BodyFormat(enum.StrEnum):
    """JSON: the event with its ids and OpenWOP payload; SLACK: `{"text": ...}` (what a Slack
    or Mattermost incoming webhook accepts), one line for a person."""

    JSON = "json"
    SLACK = "slack"


@dataclass(frozen=True)
class Webhook:
    """Where one tenant's chosen events go. The URL and secret never appear in a repr (nor in
    logs): a URL may itself be a credential (Slack's are)."""

    id: str
    tenant: str
    url: str = field(repr=False)
    secret: bytes = field(repr=False)
    event_types: tuple[str, ...] = DEFAULT_EVENT_TYPES
    project_ids: tuple[str, ...] = ()
    format: BodyFormat = BodyFormat.JSON


@dataclass(frozen=True)
class AlertEvent:
    """An event of the tenant stream with its run's owners: what an alert is made of."""

    tenant: str
    run_id: str
    seq: int
    type: str
    payload_json: str
    created_at: datetime
    project_id: str
    workflow_id: str
    agent_id: str
    pool_key: str = ""  # a pool window's own event: its place in the stream, for identity
    pool_scope: str = ""  # and its scope (the scope id is the matching owner id)


@dataclass(frozen=True)
class Alert:
    """One POST: the same bytes and headers on every attempt, from any process."""

    delivery_id: str
    body: bytes = field(repr=False)
    headers: dict[str, str] = field(repr=False)


def delivery_id(webhook: Webhook, event: AlertEvent) -> str:
    """Stable across retries, restarts and replicas: the event's identity (tenant, run_id,
    seq) for this webhook, so a receiver can drop the duplicates at-least-once may bring."""
    name = json.dumps([event.tenant, webhook.id, event.pool_key or event.run_id, event.seq])
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, name))


def signature(secret: bytes, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256 over the exact body bytes."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def timestamp_signature(secret: bytes, body: bytes, at: int) -> str:
    """`t=<at>,v1=<hex>`: HMAC-SHA256 over the ASCII digits of `at`, a dot, then the body."""
    mac = hmac.new(secret, f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


def verify_timestamp_signature(
    secret: bytes, body: bytes, header: str, now: int, window: int = REPLAY_WINDOW_SECONDS
) -> bool:
    """What a receiver checks: a v1 signature of this body at t, and t within `window`
    seconds of `now` (either way: clocks differ)."""
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    stamp = fields.get("t", "")
    if not stamp.isdigit() or abs(now - int(stamp)) > window:
        return False
    expected = timestamp_signature(secret, body, int(stamp))
    return hmac.compare_digest(expected, f"t={stamp},v1={fields.get('v1', '')}")


def attempt_headers(webhook: Webhook, found: Alert, now: int) -> dict[str, str]:
    """One attempt's headers: the alert's, and its body signed with the attempt's time."""
    signed = timestamp_signature(webhook.secret, found.body, now)
    return found.headers | {TIMESTAMP_SIGNATURE_HEADER: signed}


def _instant(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def json_body(event: AlertEvent, delivery: str) -> bytes:
    """The envelope with the OpenWOP payload spliced in verbatim (exact numbers, as stored)."""
    envelope = {
        "deliveryId": delivery,
        "tenant": event.tenant,
        "type": event.type,
        "runId": event.run_id,
        "seq": event.seq,
        "projectId": event.project_id,
        "workflowId": event.workflow_id,
        "agentId": event.agent_id,
        "createdAt": _instant(event.created_at),
    }
    if event.pool_scope:
        envelope["poolScope"] = event.pool_scope
    head = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return (head[:-1] + ',"payload":' + event.payload_json + "}").encode()


def _number(value: Any) -> str:
    return str(value) if isinstance(value, int | Decimal) else json.dumps(value)


def _unit(dimension: Any, amount: Any) -> str:
    return f"{_number(amount)} USD" if dimension == "cost" else _number(amount)


def summary(event: AlertEvent) -> str:
    """One line for a person: what happened, to which run, in the event's own numbers."""
    data: dict[str, Any] = json.loads(event.payload_json, parse_float=Decimal)
    d = data.get("dimension")
    if event.type == ev.ThresholdCrossed.event_type:
        what = (
            f"{d} passed {data['percent']}% of its limit:"
            f" {_unit(d, data['consumed'])} of {_unit(d, data['limit'])}"
        )
    elif event.type == ev.BudgetExhausted.event_type:
        what = f"{d} budget exhausted: {_unit(d, data['consumed'])} of {_unit(d, data['limit'])}"
    elif event.type == ev.CapBreached.event_type:
        observed, limit = _number(data["observed"]), _number(data["limit"])
        what = f"{data['kind']} cap breached: {observed} asked, limit {limit}"
    elif event.type == ev.RunFailed.event_type:
        what = f"run failed: {data['error']['message']}"
    elif event.type == ev.BudgetConsumed.event_type:
        what = f"{d} consumed: {_unit(d, data['consumed'])} of {_unit(d, data['limit'])}"
    else:
        what = event.type
    where = f"run {event.run_id} (project {event.project_id}, tenant {event.tenant})"
    if event.pool_scope:
        # An end-user or key pool's alert names its scope only (an end-user id never leaves).
        scope_id = event.project_id or event.workflow_id or event.agent_id
        named = f"{event.pool_scope} pool {scope_id}" if scope_id else f"{event.pool_scope} pool"
        where = f"{named} (tenant {event.tenant})"
    return f"[ration] {where}: {what}"


def slack_body(event: AlertEvent) -> bytes:
    return json.dumps({"text": summary(event)}, ensure_ascii=False).encode()


def alert(webhook: Webhook, event: AlertEvent) -> Alert:
    """The POST of one event to one webhook, signed with the webhook's secret."""
    delivery = delivery_id(webhook, event)
    slack = webhook.format is BodyFormat.SLACK
    body = slack_body(event) if slack else json_body(event, delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ration-notify",
        SIGNATURE_HEADER: signature(webhook.secret, body),
        DELIVERY_HEADER: delivery,
        EVENT_HEADER: event.type,
    }
    return Alert(delivery, body, headers)


@dataclass(frozen=True)
class RetryBackoff:
    """Exponential: `first` after the first failed attempt, doubling up to `longest`."""

    first: float
    longest: float

    def delay(self, failed_attempts: int) -> float:
        doublings = min(max(failed_attempts - 1, 0), 60)
        return min(self.first * float(2**doublings), self.longest)
