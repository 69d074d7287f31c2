"""The kustomize base validates against the Kubernetes schemas and wires the real settings."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from budget_service.usecases.notify_settings import NotifySettings
from budget_service.usecases.settings import BudgetSettings
from memory_service.usecases.settings import MemorySettings
from servicekit.auth import TokenTable
from servicekit.settings import Env

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The oldest Kubernetes we promise (native gRPC probes are GA from 1.27) and the newest schemas.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
SETTINGS: dict[str, type[BudgetSettings] | type[MemorySettings]] = {
    "budget": BudgetSettings,
    "memory": MemorySettings,
}
Manifest = dict[str, Any]


def manifests(*names: str) -> list[tuple[str, Manifest]]:
    paths = [K8S / name for name in names] or sorted(K8S.glob("*.yaml"))
    return [
        (path.name, doc)
        for path in paths
        for doc in yaml.safe_load_all(path.read_text())
        if doc and path.name != "kustomization.yaml"
    ]


def base() -> list[Manifest]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [doc for _, doc in manifests(*kustomization["resources"])]


def one(kind: str, name: str) -> Manifest:
    (found,) = [d for d in base() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def container(deployment: Manifest) -> Manifest:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


POD_IP = "10.244.1.7"
# Addresses that bind every interface: /metrics has no authentication and must never use them.
WILDCARDS = {"0.0.0.0", "::", "0:0:0:0:0:0:0:0", "", "*"}


def pod_env(deployment: Manifest, tokens: Path) -> dict[str, str]:
    """The container's environment as the kubelet builds it: the ConfigMap, then `env` in
    order, `$(VAR)` expanded from what is defined before, the downward API's pod IP."""
    env = dict(one("ConfigMap", "ration-config")["data"])
    env |= {"RATION_DATABASE_URL": "postgresql://x@db/x", "RATION_TOKEN_FILE": str(tokens)}
    for item in container(deployment)["env"]:
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field == "status.podIP":
            env[item["name"]] = POD_IP
        elif "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], item["value"])
    return env


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert "namespace" not in kustomization, "the base is namespace-agnostic"
    assert all("namespace" not in doc["metadata"] for doc in base())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("filename", "manifest"),
    [m for m in manifests() if m[1]["kind"] not in CUSTOM_KINDS],
    ids=lambda value: value if isinstance(value, str) else value["kind"],
)
def test_manifest_validates_against_the_kubernetes_schema(
    filename: str, manifest: Manifest, version: str
) -> None:
    kubernetes_validate.validate(manifest, version, strict=True)


def test_the_schema_check_rejects_what_kubernetes_would() -> None:
    deployment = copy.deepcopy(one("Deployment", "ration-budget"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_deployment_ports_and_probes_are_what_the_service_listens_on(
    name: str, tmp_path: Path
) -> None:
    deployment = one("Deployment", f"ration-{name}")
    main = container(deployment)
    assert main["envFrom"] == [{"configMapRef": {"name": "ration-config"}}]
    assert main["args"] == [name, "serve"]
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    server = SETTINGS[name].from_env(Env(pod_env(deployment, tokens))).server
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    assert ports == {"grpc": server.port, "metrics": server.metrics_port}
    assert server.host == "0.0.0.0"
    assert server.metrics_host == POD_IP, "metrics listen on the pod IP the scrapes reach"
    assert main["readinessProbe"]["grpc"]["port"] == server.port
    assert main["startupProbe"]["grpc"]["port"] == server.port
    assert main["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    service = one("Service", f"ration-{name}")
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("grpc", server.port, "grpc"),
        ("metrics", server.metrics_port, "metrics"),
    }


def test_no_metrics_bind_of_the_manifests_is_every_interface(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    config = one("ConfigMap", "ration-config")["data"]
    assert not any(key.endswith("_METRICS_LISTEN") for key in config), "set per Deployment"
    for name in SETTINGS:
        env = pod_env(one("Deployment", f"ration-{name}"), tokens)
        variable = f"RATION_{name.upper()}_METRICS_LISTEN"
        host = env[variable].rpartition(":")[0].strip("[]")
        assert host not in WILDCARDS, f"{name}: {variable}={env[variable]}"


def test_notify_deployment_reads_its_webhooks_and_probes_its_health(tmp_path: Path) -> None:
    """`ration notify` as the pod starts it: the Secret's webhooks file, health and /metrics on
    the pod IP, gRPC probes on the health port, a Service for the scrapes."""
    deployment = one("Deployment", "ration-notify")
    main = container(deployment)
    assert main["args"] == ["notify"]
    (example,) = [doc for _, doc in manifests("secret.example.yaml")]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    (item,) = volume["secret"]["items"]
    assert volume["secret"]["secretName"] == example["metadata"]["name"]
    mount = next(m for m in main["volumeMounts"] if m["name"] == volume["name"])
    webhooks = tmp_path / item["path"]
    webhooks.write_text(example["stringData"][item["key"]])
    env = pod_env(deployment, tmp_path / "tokens.json")
    assert env["RATION_NOTIFY_WEBHOOKS_FILE"] == f"{mount['mountPath']}/{item['path']}"
    env["RATION_NOTIFY_WEBHOOKS_FILE"] = str(webhooks)
    settings = NotifySettings.from_env(Env(env))
    assert not settings.dev_mode
    assert settings.health is not None
    assert settings.metrics is not None
    assert settings.health[0] == settings.metrics[0] == POD_IP
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    assert ports == {"health": settings.health[1], "metrics": settings.metrics[1]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[probe]["grpc"]["port"] == settings.health[1]
    assert deployment["spec"]["replicas"] >= 2, "leases let a second replica take over"
    service = one("Service", "ration-notify")
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("health", settings.health[1]),
        ("metrics", settings.metrics[1]),
    }


def pod_labels(deployment: Manifest) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize(
    "name", ["ration-budget", "ration-memory", "ration-notify", "ration-migrate"]
)
def test_pods_run_non_root_with_a_read_only_root_and_no_capabilities(name: str) -> None:
    kind = "Job" if name == "ration-migrate" else "Deployment"
    pod = one(kind, name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001, "the Dockerfile's USER"
    assert pod["automountServiceAccountToken"] is False
    main = pod["containers"][0]
    assert main["image"] == "ration"
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    tmp = next(m for m in main["volumeMounts"] if m["mountPath"] == "/tmp")
    volume = next(v for v in pod["volumes"] if v["name"] == tmp["name"])
    assert "emptyDir" in volume
    assert {"cpu", "memory"} <= main["resources"]["requests"].keys()
    assert "memory" in main["resources"]["limits"]


def test_secret_references_name_keys_the_example_secret_provides() -> None:
    (example,) = [doc for _, doc in manifests("secret.example.yaml")]
    keys = set(example["stringData"])
    config = one("ConfigMap", "ration-config")["data"]
    for kind, name in (
        ("Deployment", "ration-budget"),
        ("Deployment", "ration-memory"),
        ("Job", "ration-migrate"),
    ):
        pod = one(kind, name)["spec"]["template"]["spec"]
        for env in pod["containers"][0]["env"]:
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == example["metadata"]["name"]
                assert ref["key"] in keys
        for volume in pod["volumes"]:
            if "secret" not in volume:
                continue
            assert volume["secret"]["secretName"] == example["metadata"]["name"]
            (item,) = volume["secret"]["items"]
            assert item["key"] in keys
            mount = next(
                m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]
            )
            assert config["RATION_TOKEN_FILE"] == f"{mount['mountPath']}/{item['path']}"


def test_the_example_token_file_has_the_shape_the_server_reads(tmp_path: Path) -> None:
    (example,) = [doc for _, doc in manifests("secret.example.yaml")]
    path = tmp_path / "tokens.json"
    path.write_text(
        example["stringData"]["tokens.json"].replace("<sha256 hex of the token>", "a" * 64)
    )
    assert not TokenTable.load(path).dev_mode


@pytest.mark.parametrize("name", ["ration-budget", "ration-memory"])
def test_autoscaler_and_disruption_budget_target_the_deployment(name: str) -> None:
    deployment = one("Deployment", name)
    target = one("HorizontalPodAutoscaler", name)["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", name)
    pdb = one("PodDisruptionBudget", name)
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"]["minAvailable"] < one("HorizontalPodAutoscaler", name)["spec"]["minReplicas"]


def test_migration_job_runs_ration_migrate() -> None:
    job = one("Job", "ration-migrate")["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["migrate"]
    assert job["restartPolicy"] in ("OnFailure", "Never")


def test_service_monitor_scrapes_the_metrics_port_of_both_services() -> None:
    monitor = one("ServiceMonitor", "ration")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (expression,) = monitor["spec"]["selector"]["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("app.kubernetes.io/name", "In")
    services = [d for d in base() if d["kind"] == "Service"]
    selected = [
        s for s in services if s["metadata"]["labels"][expression["key"]] in expression["values"]
    ]
    assert {s["metadata"]["name"] for s in selected} == {
        "ration-budget",
        "ration-memory",
        "ration-notify",
    }
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["path"] == "/metrics"
        for svc in selected:
            assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}


def test_prometheus_rule_has_the_operator_shape_and_the_rules_of_alerts_yml() -> None:
    rule = one("PrometheusRule", "ration")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert rule["spec"] == {"groups": alerts["groups"]}, (
        "deploy/k8s/prometheusrule.yaml differs from deploy/prometheus/alerts.yml: refresh it "
        "(deploy/README.md, Alerts and runbooks)"
    )
    for group in rule["spec"]["groups"]:
        assert group["name"]
        for entry in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= entry.keys()


def test_kustomize_build_validates_when_kubectl_is_installed() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the manifests were validated one by one above")
    built = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    documents = [doc for doc in yaml.safe_load_all(built) if doc]
    assert len(documents) == len(base())
    for doc in documents:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ration"
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)
