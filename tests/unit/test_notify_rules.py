"""Pure rules of the tenant stream and of webhook alerts: cursors, bodies, signatures, settings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from budget_service.domain.alerts import (
    AlertEvent,
    BodyFormat,
    RetryBackoff,
    Webhook,
    alert,
    attempt_headers,
    delivery_id,
    summary,
    verify_timestamp_signature,
)
from budget_service.domain.tenant_events import START, Position, parse_cursor
from budget_service.usecases.notify_settings import NotifySettings
from servicekit.errors import FieldViolation
from servicekit.settings import Env, SettingsError

SECRET = "hunter2-very-secret"
HOOK_URL = "https://hooks.example.com/services/T0/B0/token-in-the-url"


def event(**fields: Any) -> AlertEvent:
    values: dict[str, Any] = {
        "tenant": "acme",
        "run_id": "r-1",
        "seq": 4,
        "type": "budget.exhausted",
        "payload_json": '{"dimension":"cost","consumed":0.5,"limit":0.5}',
        "created_at": datetime(2025, 5, 1, 12, 0, tzinfo=UTC),
        "project_id": "travel",
        "workflow_id": "",
        "agent_id": "",
    }
    return AlertEvent(**(values | fields))


def hook(**fields: Any) -> Webhook:
    values: dict[str, Any] = {"id": "ops", "tenant": "acme", "url": HOOK_URL}
    return Webhook(secret=SECRET.encode(), **(values | fields))


def test_cursors_round_trip_and_order_like_the_stream() -> None:
    positions = [
        START,
        Position(7, "", 0),
        Position(7, "a", 1),
        Position(7, "b", 1),
        Position(8, "", 0),
    ]
    assert positions == sorted(positions)
    for p in positions:
        assert parse_cursor(p.cursor()) == p
    assert parse_cursor("") == START


@pytest.mark.parametrize(
    "text",
    ["2.1.1.r", "1.x.1.r", "1.-1.1.r", "1.1.-1.r", "1.+1.1.r", "1.1.1.bad id", f"1.{2**64}.1.r"],
)
def test_a_malformed_cursor_is_a_field_violation(text: str) -> None:
    token = base64.urlsafe_b64encode(text.encode()).decode()
    assert isinstance(parse_cursor(token), FieldViolation)
    assert isinstance(parse_cursor("%%%"), FieldViolation)


def test_the_json_body_carries_the_payload_verbatim_and_is_signed() -> None:
    posted = alert(hook(), event())
    body = json.loads(posted.body)
    assert body == {
        "deliveryId": posted.delivery_id,
        "tenant": "acme",
        "type": "budget.exhausted",
        "runId": "r-1",
        "seq": 4,
        "projectId": "travel",
        "workflowId": "",
        "agentId": "",
        "createdAt": "2025-05-01T12:00:00.000000Z",
        "payload": {"dimension": "cost", "consumed": 0.5, "limit": 0.5},
    }
    assert posted.body.endswith(b',"payload":{"dimension":"cost","consumed":0.5,"limit":0.5}}')
    expected = hmac.new(SECRET.encode(), posted.body, hashlib.sha256).hexdigest()
    assert posted.headers["X-Ration-Signature"] == f"sha256={expected}"
    assert posted.headers["X-Ration-Delivery"] == posted.delivery_id
    assert SECRET not in repr(posted) + repr(hook())
    assert HOOK_URL not in repr(hook())


def test_the_delivery_id_is_the_events_identity_per_webhook() -> None:
    first = delivery_id(hook(), event())
    assert delivery_id(hook(), event(payload_json="{}")) == first  # same event, any attempt
    assert delivery_id(hook(id="other"), event()) != first
    assert delivery_id(hook(), event(seq=5)) != first
    assert delivery_id(hook(), event(tenant="beta")) != first


def test_the_slack_body_is_one_line_of_text() -> None:
    posted = alert(hook(format=BodyFormat.SLACK), event())
    assert json.loads(posted.body) == {
        "text": "[ration] run r-1 (project travel, tenant acme): cost budget exhausted:"
        " 0.5 USD of 0.5 USD"
    }
    crossed = event(
        type="budget.threshold.crossed",
        payload_json='{"dimension":"tokens","consumed":80,"limit":100,"percent":80}',
    )
    assert summary(crossed).endswith("tokens passed 80% of its limit: 80 of 100")
    breached = event(
        type="cap.breached", payload_json='{"kind":"budget-tokens","limit":100,"observed":120}'
    )
    assert summary(breached).endswith("budget-tokens cap breached: 120 asked, limit 100")
    failed = event(
        type="run.failed",
        payload_json='{"error":{"code":"budget_exhausted","message":"budget exhausted"}}',
    )
    assert summary(failed).endswith("run failed: budget exhausted")


def test_an_end_user_pools_alert_names_its_scope_but_never_the_end_user() -> None:
    """The alert of an end-user pool (issue 27): alert_event leaves every owner id empty."""
    pooled = event(run_id="", project_id="", pool_key="k", pool_scope="end_user")
    assert summary(pooled) == "[ration] end_user pool (tenant acme): cost budget exhausted:" + (
        " 0.5 USD of 0.5 USD"
    )
    project = event(run_id="", pool_key="k", pool_scope="project")
    assert summary(project).startswith("[ration] project pool travel (tenant acme)")


def test_retries_back_off_exponentially_to_a_ceiling() -> None:
    backoff = RetryBackoff(0.5, 60)
    assert [backoff.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff.delay(10_000) == 60


def settings_with(tmp_path: Path, document: Any, **env: str) -> NotifySettings:
    path = tmp_path / "hooks.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return NotifySettings.from_env(Env({"RATION_NOTIFY_WEBHOOKS_FILE": str(path)} | env))


def test_webhooks_are_read_from_the_file_with_defaults(tmp_path: Path) -> None:
    rows = [
        {"id": "ops", "tenant": "acme", "url": HOOK_URL, "secret": SECRET},
        {
            "id": "chat",
            "tenant": "acme",
            "url": "http://127.0.0.1:9/x",
            "secret_env": "CHAT_SECRET",
            "events": ["budget.exhausted"],
            "projects": ["travel"],
            "format": "slack",
        },
    ]
    found = settings_with(tmp_path, {"webhooks": rows}, CHAT_SECRET="from-env")
    ops, chat = found.webhooks
    assert ops.event_types == (
        "budget.threshold.crossed",
        "budget.exhausted",
        "cap.breached",
        "run.failed",
    )
    assert (ops.format, ops.secret) == (BodyFormat.JSON, SECRET.encode())
    assert (chat.format, chat.secret, chat.project_ids) == (
        BodyFormat.SLACK,
        b"from-env",
        ("travel",),
    )
    assert (found.start, found.lease_seconds, found.timeout_seconds) == ("latest", 30, 10)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"tenant": "acme", "url": HOOK_URL, "secret": SECRET}, "webhooks[0].id"),
        ({"id": "bad id", "tenant": "acme", "url": HOOK_URL, "secret": SECRET}, "webhooks[0].id"),
        ({"id": "a", "url": HOOK_URL, "secret": SECRET}, "webhooks[0].tenant"),
        ({"id": "a", "tenant": "acme", "url": "ftp://x/" + SECRET, "secret": SECRET}, ".url"),
        ({"id": "a", "tenant": "acme", "url": HOOK_URL}, "exactly one of secret"),
        ({"id": "a", "tenant": "acme", "url": HOOK_URL, "secret_env": "UNSET_VAR"}, "not set"),
        ({"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": ""}, ".secret"),
        (
            {"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": SECRET, "events": ["x"]},
            ".events",
        ),
        (
            {"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": SECRET, "format": "xml"},
            ".format",
        ),
        ({"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": SECRET, "x": 1}, "unknown"),
    ],
)
def test_a_bad_webhook_is_refused_naming_it_but_never_its_url_or_secret(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match="RATION_NOTIFY_WEBHOOKS_FILE") as refused:
        settings_with(tmp_path, {"webhooks": [row]})
    assert message in str(refused.value)
    assert SECRET not in str(refused.value)
    assert "token-in-the-url" not in str(refused.value)


def test_bad_files_and_settings_are_refused(tmp_path: Path) -> None:
    row = {"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": SECRET}
    with pytest.raises(SettingsError, match="not valid JSON"):
        settings_with(tmp_path, "{")
    with pytest.raises(SettingsError, match="expected"):
        settings_with(tmp_path, {"webhooks": []})
    with pytest.raises(SettingsError, match="repeats webhook id"):
        settings_with(tmp_path, {"webhooks": [row, row]})
    with pytest.raises(SettingsError, match="RATION_NOTIFY_TIMEOUT_MS"):
        settings_with(tmp_path, {"webhooks": [row]}, RATION_NOTIFY_TIMEOUT_MS="20000")
    with pytest.raises(SettingsError, match="RATION_NOTIFY_START"):
        settings_with(tmp_path, {"webhooks": [row]}, RATION_NOTIFY_START="yesterday")
    with pytest.raises(SettingsError, match="RATION_NOTIFY_WEBHOOKS_FILE is required"):
        NotifySettings.from_env(Env({}))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:abc/hook", "port"),
        ("http://127.0.0.1:0/hook", "port"),
        ("http://127.0.0.1:70000/hook", "port"),
        ("http://127.0.0.1/a b", "space or a control character"),
        ("http://127.0.0.1/a\r\nX-Injected: 1", "space or a control character"),
        ("http://127.0.0.1/a\nb", "space or a control character"),
        ("http://127.0.0.1/a\tb", "space or a control character"),
        ("http://user:pw@127.0.0.1/hook", "credentials"),
        ("https://user@hooks.example.com/hook", "credentials"),
        ("ftp://127.0.0.1/hook", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///no-host", "http:// or https://"),
    ],
)
def test_a_url_that_can_never_be_sent_is_refused_naming_its_row(
    tmp_path: Path, url: str, problem: str
) -> None:
    good = {"id": "ok", "tenant": "acme", "url": HOOK_URL, "secret": SECRET}
    bad = {"id": "bad", "tenant": "acme", "url": url, "secret": SECRET}
    with pytest.raises(SettingsError) as refused:
        settings_with(tmp_path, {"webhooks": [good, bad]})
    message = str(refused.value)
    assert "webhooks[1].url" in message
    assert problem in message
    assert "pw@" not in message  # the URL is never echoed
    assert "/hook" not in message


def test_the_timestamped_signature_covers_time_and_body_and_expires() -> None:
    posted = alert(hook(), event())
    headers = attempt_headers(hook(), posted, 1_700_000_000)
    signed = headers["Ration-Signature"]
    mac = hmac.new(SECRET.encode(), b"1700000000." + posted.body, hashlib.sha256).hexdigest()
    assert signed == f"t=1700000000,v1={mac}"
    assert headers["X-Ration-Signature"] == posted.headers["X-Ration-Signature"]  # kept
    secret = SECRET.encode()
    assert verify_timestamp_signature(secret, posted.body, signed, 1_700_000_000 + 300)
    assert not verify_timestamp_signature(secret, posted.body, signed, 1_700_000_000 + 301)
    assert not verify_timestamp_signature(secret, posted.body + b" ", signed, 1_700_000_000)
    assert not verify_timestamp_signature(b"other", posted.body, signed, 1_700_000_000)
    replayed = signed.replace("t=1700000000", "t=1700000900")  # a new time, the old mac
    assert not verify_timestamp_signature(secret, posted.body, replayed, 1_700_000_900)
    assert not verify_timestamp_signature(secret, posted.body, "garbage", 1_700_000_000)


def test_notify_binds_only_loopback_on_the_embedded_database(tmp_path: Path) -> None:
    row = {"id": "a", "tenant": "acme", "url": HOOK_URL, "secret": SECRET}
    everywhere = {"RATION_NOTIFY_METRICS_LISTEN": "0.0.0.0:9466"}
    with pytest.raises(SettingsError, match="RATION_NOTIFY_METRICS_LISTEN"):
        settings_with(tmp_path, {"webhooks": [row]}, **everywhere)
    with pytest.raises(SettingsError, match="RATION_NOTIFY_LISTEN"):
        settings_with(tmp_path, {"webhooks": [row]}, RATION_NOTIFY_LISTEN="0.0.0.0:50053")
    dev = settings_with(tmp_path, {"webhooks": [row]})
    assert dev.dev_mode
    assert (dev.health, dev.metrics) == (("127.0.0.1", 50053), ("127.0.0.1", 9466))
    url = {"RATION_DATABASE_URL": "postgresql://app@db/ration"}
    deployed = settings_with(tmp_path, {"webhooks": [row]}, **everywhere, **url)
    assert not deployed.dev_mode
    assert deployed.metrics == ("0.0.0.0", 9466)
    off = settings_with(tmp_path, {"webhooks": [row]}, RATION_NOTIFY_METRICS_LISTEN="off")
    assert off.metrics is None
