"""The minimal kustomize overlay of deploy/README.md builds as pasted, next to a checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "deploy" / "README.md"


def overlay_block() -> str:
    block = re.search(
        r"```yaml\n(# overlays/prod/kustomization.yaml\n.*?)```", README.read_text(), re.S
    )
    assert block, "deploy/README.md lost its minimal overlay"
    return block.group(1)


def test_the_overlay_reads_no_file_outside_its_directory() -> None:
    document = yaml.safe_load(overlay_block())
    for generator in document.get("configMapGenerator", []) + document.get("secretGenerator", []):
        for file in generator.get("files", []):
            assert not Path(file.split("=", 1)[-1]).is_absolute()
            assert ".." not in Path(file.split("=", 1)[-1]).parts, file


def test_the_readme_overlay_builds_with_kubectl_kustomize(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl") or shutil.which("kustomize")
    if kubectl is None:
        pytest.skip("neither kubectl nor kustomize is installed")
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    overlay = tmp_path / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(overlay_block())
    (overlay / "tokens.json").write_text('{"tokens": []}')
    (overlay / "webhooks.json").write_text('{"webhooks": []}')
    argv = (
        [kubectl, "kustomize", str(overlay)]
        if kubectl.endswith("kubectl")
        else [kubectl, "build", str(overlay)]
    )
    built = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    documents = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    by_name = {(doc["kind"], doc["metadata"]["name"]): doc for doc in documents}
    dashboards = by_name[("ConfigMap", "ration-dashboards")]
    assert dashboards["metadata"]["namespace"] == "ration"
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert set(dashboards["data"]) == {"budget.json", "memory.json"}
    assert ("Secret", "ration-secrets") in by_name
    budget = by_name[("Deployment", "ration-budget")]
    image = budget["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/ration:0.2.0"
    assert all(doc["metadata"].get("namespace") == "ration" for doc in documents)


def test_the_base_and_the_readme_overlay_pull_the_current_release() -> None:
    from ration_server import __version__

    base = yaml.safe_load((ROOT / "deploy" / "k8s" / "kustomization.yaml").read_text())
    assert {image["newTag"] for image in base["images"]} == {__version__}
    overlay = yaml.safe_load(overlay_block())
    assert {image["newTag"] for image in overlay["images"]} == {__version__}
