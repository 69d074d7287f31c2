"""The README's webhook body, run alerts and a pool's own alerts, is the body json_body builds."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from budget_service.domain.alerts import AlertEvent, json_body

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
PAYLOAD = '{"dimension":"cost","percent":80,"consumed":0.8,"limit":1.0}'


def documented_fields() -> set[str]:
    sentence = re.search(r"Each POST has a JSON body: (.*?), and `payload`", README, re.S)
    assert sentence, "README.md lost the webhook body sentence"
    return set(re.findall(r"`(\w+)`", sentence.group(1))) | {"payload"}


def body(**fields: str) -> dict[str, object]:
    event = AlertEvent(
        tenant="acme",
        run_id=fields.get("run_id", ""),
        seq=1,
        type="budget.threshold.crossed",
        payload_json=PAYLOAD,
        created_at=datetime(2025, 5, 1, tzinfo=UTC),
        project_id=fields.get("project_id", ""),
        workflow_id=fields.get("workflow_id", ""),
        agent_id=fields.get("agent_id", ""),
        pool_key=fields.get("pool_key", ""),
        pool_scope=fields.get("pool_scope", ""),
    )
    parsed: dict[str, object] = json.loads(json_body(event, "d-1"))
    return parsed


def test_a_run_alert_has_the_documented_fields_and_no_pool_scope() -> None:
    sent = body(run_id="run-1", project_id="travel")
    assert set(sent) == documented_fields()
    assert "Run alerts have no `poolScope`" in README


@pytest.mark.parametrize(
    ("scope", "field", "key"),
    [("project", "project_id", "projectId"), ("workflow", "workflow_id", "workflowId"),
     ("agent", "agent_id", "agentId")],
)  # fmt: skip
def test_a_pool_alert_is_as_documented(scope: str, field: str, key: str) -> None:
    sent = body(pool_key="pool-key", pool_scope=scope, **{field: "fleet"})
    assert set(sent) == documented_fields() | {"poolScope"}
    assert (sent["runId"], sent["poolScope"], sent[key]) == ("", scope, "fleet")
    others = {"projectId", "workflowId", "agentId"} - {key}
    assert all(sent[other] == "" for other in others)
    assert '`"runId": ""`' in README
    assert f"`{key}`" in README.split("A pool's own alert", 1)[1].split("\n\n", 1)[0]
