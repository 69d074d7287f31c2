"""Prometheus config, alert rules and Grafana dashboards: valid for promtool and for Grafana.

promtool comes from Debian's `prometheus` package (`.ci/run` installs it). Where it is absent
these tests skip, except under CI (CI=true), where a missing promtool is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
README = ROOT / "deploy" / "README.md"
# Grafana's variables, replaced by what "All" and a typical range give them.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$job": ".*",
    "$instance": ".*",
    "$project": ".*",
}
METRIC = re.compile(r"\b((?:grpc_server|ration)_[a-z0-9_]+)\b")
COMPARISON = re.compile(
    r"^(?P<measure>.*\S)\s*(?:>|<|>=|<=|==|!=)\s*(?:bool\s+)?[0-9.e+-]+\s*$", re.S
)


def grafana_to_promql(expr: str) -> str:
    """A panel or variable query as Prometheus sees it once Grafana has filled it in."""
    label_values = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr.strip(), re.S)
    if label_values:
        expr = label_values[1]
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable of every dashboard."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in panels(board):
            for target in panel.get("targets", []):
                where = f"{path.stem}: {panel['title']} [{target['refId']}]"
                found.append((where, grafana_to_promql(target["expr"])))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                query = variable["query"]["query"]
                found.append(
                    (f"{path.stem}: variable {variable['name']}", grafana_to_promql(query))
                )
    return found


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def documented_metrics() -> set[str]:
    names = re.findall(
        r"^\| `([a-z0-9_]+)` \| (counter|gauge|histogram) \|", README.read_text(), re.M
    )
    exposed = set()
    for name, kind in names:
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        exposed |= {name + suffix for suffix in suffixes}
    return exposed


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing under CI: install Debian's `prometheus` package")
        pytest.skip("promtool not installed (apt-get install prometheus); runs under CI")
    return path


def run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_scrape_config_and_the_rules_it_loads(promtool: str) -> None:
    result = run(promtool, "check", "config", str(PROMETHEUS / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


def test_promtool_accepts_the_alert_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", str(PROMETHEUS / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_and_alert_expression_parses(promtool: str, tmp_path: Path) -> None:
    """promtool parses each expression as a recording rule: one group per query, named after it."""
    queries = dashboard_queries() + [(rule["alert"], rule["expr"]) for rule in alert_rules()]
    groups = [
        {"name": where, "rules": [{"record": f"ration:check_{index}", "expr": expr}]}
        for index, (where, expr) in enumerate(queries)
    ]
    rules = tmp_path / "queries.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    result = run(promtool, "check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(queries)} rules found" in result.stdout


def test_queries_use_only_the_documented_metrics() -> None:
    documented = documented_metrics()
    assert documented, "the metrics table of deploy/README.md is missing"
    queries = dashboard_queries() + [(rule["alert"], rule["expr"]) for rule in alert_rules()]
    for where, expr in queries:
        unknown = set(METRIC.findall(expr)) - documented
        assert not unknown, f"{where} uses undocumented metrics {unknown}"


def test_alerts_compare_a_measure_with_a_threshold() -> None:
    """The shape the system test relies on: it evaluates the measure and requires data."""
    for rule in alert_rules():
        assert COMPARISON.match(rule["expr"].strip()), rule["alert"]


def test_alerts_carry_a_summary_a_description_and_a_runbook_that_exists() -> None:
    headings = {
        line.removeprefix("### ").strip().lower()
        for line in README.read_text().splitlines()
        if line.startswith("### ")
    }
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    for rule in alert_rules():
        annotations = rule["annotations"]
        assert annotations["summary"]
        assert annotations["description"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical")
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "deploy/README.md"
        assert anchor == rule["alert"].lower()
        assert anchor in headings, f"no runbook section for {rule['alert']}"


@pytest.mark.parametrize("name", ["budget", "memory"])
def test_dashboard_is_provisionable_and_filters_by_service(name: str) -> None:
    board = json.loads((DASHBOARDS / f"{name}.json").read_text())
    assert board["uid"] == f"ration-{name}"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    expected = {"datasource", "job", "instance"} | ({"project"} if name == "budget" else set())
    assert set(variables) == expected
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["description"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            for variable in ("$job", "$instance"):
                assert variable in target["expr"], f"{panel['title']} ignores {variable}"


def test_spend_panels_filter_by_project() -> None:
    board = json.loads((DASHBOARDS / "budget.json").read_text())
    for panel in panels(board):
        for target in panel.get("targets", []):
            if "ration_budget_consumed_" in target["expr"]:
                assert 'project=~"$project"' in target["expr"], panel["title"]


def test_every_panel_is_described_in_the_readme() -> None:
    readme = " ".join(README.read_text().split())
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        assert board["title"] in readme
        for panel in panels(board):
            assert panel["title"] in readme, f"{path.name}: {panel['title']}"


def test_prometheus_scrapes_both_services_and_loads_the_alerts() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"budget", "memory"} <= jobs


# ---- units and services of the dashboard panels ------------------------------------------------

OWN_SERVICE = {
    "budget": "ration.budget.v1.BudgetService",
    "memory": "ration.memory.v1.MemoryService",
}
# A metric's unit is the suffix of its name (Prometheus naming); anything else counts events.
UNIT_SUFFIXES = ("usd", "tokens", "chars", "bytes", "seconds", "ratio")
# The Grafana units that draw a query unit on an axis.
GRAFANA_UNITS = {
    "usd": {"currencyUSD"},
    "usd/h": {"currencyUSD"},
    "tokens": {"count:tokens"},
    "tokens/s": {"count:tokens/s"},
    "chars": {"count:chars"},
    "bytes": {"bytes"},
    "seconds": {"s"},
    "ratio": {"percentunit"},
    "percent": {"percent"},
    "count": {"short", "none"},
    "count/s": {"ops", "reqps"},
}


def metric_unit(name: str) -> str:
    base = re.sub(r"_(total|bucket|sum|count)$", "", name)
    return next((unit for unit in UNIT_SUFFIXES if base.endswith(f"_{unit}")), "count")


def query_unit(expr: str) -> str:
    """The unit of what a query draws: its metrics' unit, per second for a rate, per hour for
    3600 × a rate, a ratio (or percent for 100 ×) for one aggregate divided by another."""
    units = {metric_unit(name) for name in METRIC.findall(expr)}
    assert len(units) == 1, f"{expr!r} mixes units {units}"
    (unit,) = units
    shape = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr).strip()
    if re.search(r"\)\s*/\s*", shape):
        return "percent" if shape.startswith("100 *") else "ratio"
    if "histogram_quantile" in shape or not re.search(r"\b(?:rate|irate)\(", shape):
        return unit
    return f"{unit}/h" if shape.startswith("3600 *") else f"{unit}/s"


def drawn_panels() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in panels(json.loads(path.read_text())):
            if panel["type"] != "row":
                yield path.stem, panel


@pytest.mark.parametrize(
    ("board", "panel"), list(drawn_panels()), ids=lambda v: v if isinstance(v, str) else v["title"]
)
def test_each_panel_axis_carries_one_unit(board: str, panel: dict[str, Any]) -> None:
    units = {query_unit(grafana_to_promql(target["expr"])) for target in panel["targets"]}
    assert len(units) == 1, f"{board}: {panel['title']} draws {units} on one axis"
    (unit,) = units
    field_config = panel["fieldConfig"]
    assert field_config["defaults"].get("unit") in GRAFANA_UNITS[unit], (
        f"{board}: {panel['title']} draws {unit} but its axis says "
        f"{field_config['defaults'].get('unit')!r}"
    )
    for override in field_config["overrides"]:
        assert all(p["id"] != "unit" for p in override["properties"]), "a second unit"
    if unit.endswith("/h"):
        assert "per hour" in panel["title"]
        assert "per hour" in field_config["defaults"]["custom"]["axisLabel"]


def test_the_cost_rate_panel_states_its_unit_per_hour() -> None:
    board = json.loads((DASHBOARDS / "budget.json").read_text())
    (panel,) = [p for p in panels(board) if p["title"].startswith("Cost rate")]
    assert query_unit(grafana_to_promql(panel["targets"][0]["expr"])) == "usd/h"
    assert panel["title"].endswith("(USD per hour)")


def test_the_unit_check_tells_units_apart() -> None:
    assert query_unit("sum(ration_budget_pool_remaining_usd)") == "usd"
    assert query_unit("3600 * sum(rate(ration_budget_consumed_cost_usd_total[1m]))") == "usd/h"
    assert query_unit("sum(rate(ration_budget_consumed_tokens_total[1m]))") == "tokens/s"
    assert query_unit(
        "100 * min(ration_budget_pool_remaining_tokens) / max(ration_budget_pool_limit_tokens)"
    ) == ("percent")
    assert query_unit(
        "histogram_quantile(0.5, sum by (le) (rate(ration_x_seconds_bucket[1m])))"
    ) == ("seconds")
    with pytest.raises(AssertionError, match="mixes units"):
        query_unit("ration_budget_pool_remaining_tokens or ration_budget_pool_remaining_usd")


@pytest.mark.parametrize("name", sorted(OWN_SERVICE))
def test_rpc_panels_select_only_their_own_service(name: str) -> None:
    board = json.loads((DASHBOARDS / f"{name}.json").read_text())
    selected = 0
    for panel in panels(board):
        for target in panel.get("targets", []):
            expr = target["expr"]
            references = re.findall(r"\bgrpc_server_\w+", expr)
            selectors = re.findall(r"\bgrpc_server_\w+\{([^}]*)\}", expr)
            assert len(selectors) == len(references), f"{panel['title']}: a bare gRPC metric"
            for selector in selectors:
                assert f'grpc_service="{OWN_SERVICE[name]}"' in selector, panel["title"]
                selected += 1
    assert selected >= 5, "the RPC panels are checked"
