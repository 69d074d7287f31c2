"""Alert rules under promtool's rule unit tests: a service down or unscraped fires, and the
pool alert names its pool only when the series carry the opt-in tenant labels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
NOT_NAMED = "not named: RATION_METRICS_TENANT_LABELS is off"
BOUNDED = 'job="budget",scope="project"'
RANKED = BOUNDED + ',rank="1"'


def promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    document = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": tests}
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump(document))
    result = subprocess.run(
        [path, "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_down_instance_and_an_unscraped_service_fire(tmp_path: Path) -> None:
    promtool_test(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'up{job="ration-budget", instance="b1"}', "values": "0x10"},
                    {"series": 'up{job="memory", instance="m1"}', "values": "1x10"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "RationServiceDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "job": "ration-budget",
                                    "instance": "b1",
                                },
                                "exp_annotations": alert_annotations(
                                    "RationServiceDown", job="ration-budget", instance="b1"
                                ),
                            }
                        ],
                    },
                    {
                        "eval_time": "8m",
                        "alertname": "RationBudgetServiceUnscraped",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical"},
                                "exp_annotations": alert_annotations(
                                    "RationBudgetServiceUnscraped"
                                ),
                            }
                        ],
                    },
                    {"eval_time": "8m", "alertname": "RationMemoryServiceUnscraped"},
                ],
            }
        ],
    )


def alert_annotations(name: str, **labels: str) -> dict[str, str]:
    """The rule's annotations with `{{ $labels.x }}` filled in (only these simple ones)."""
    document = yaml.safe_load(ALERTS.read_text())
    rule = next(r for g in document["groups"] for r in g["rules"] if r.get("alert") == name)
    filled = {}
    for key, text in rule["annotations"].items():
        for label, value in labels.items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", value)
        filled[key] = text.strip()
    return filled


def pool_test(labels: str, alert_labels: str) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            {"series": f"ration_budget_pool_remaining_model_calls{{{labels}}}", "values": "5x10"},
            {"series": f"ration_budget_pool_limit_model_calls{{{labels}}}", "values": "100x10"},
        ],
        "promql_expr_test": [
            {
                "eval_time": "6m",
                "expr": 'ALERTS{alertname="RationBudgetPoolNearExhaustion",alertstate="firing"}',
                "exp_samples": [
                    {
                        "labels": 'ALERTS{alertname="RationBudgetPoolNearExhaustion",'
                        f'alertstate="firing",severity="warning",unit="model_calls",{alert_labels}}}',
                        "value": 1,
                    }
                ],
            }
        ],
    }


def test_the_pool_alert_watches_model_calls_and_keeps_the_pool_labels(tmp_path: Path) -> None:
    pool = ',tenant="acme",scope_id="fleet"'
    # With the opt-in labels the alert is per pool and names it (rank is not its identity).
    promtool_test(tmp_path, [pool_test(RANKED + pool, BOUNDED + pool)])
    # Without them it has no pool to name: one alert per scope kind and unit.
    promtool_test(tmp_path, [pool_test(RANKED, BOUNDED)])


def test_the_pool_alert_says_which_pool_only_with_tenant_labels() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    rule = next(
        r
        for g in document["groups"]
        for r in g["rules"]
        if r.get("alert") == "RationBudgetPoolNearExhaustion"
    )
    assert "tenant, scope_id)" in rule["expr"]
    summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
    assert "{{ if $labels.scope_id }}" in summary
    assert "{{ $labels.scope_id }}" in summary
    assert NOT_NAMED in " ".join(description.split())
