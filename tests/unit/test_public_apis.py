"""Our packages use only the public API of the packages they depend on (no `_private` imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "servicekit",
    "budget_service",
    "memory_service",
    "ration_server",
    "ration_client",
    "bench",
)


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for module in modules:
            top, *rest = module.split(".")
            if top not in PACKAGES and any(part.startswith("_") for part in rest):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {module}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_module_or_name_of_a_dependency_is_imported(package: str) -> None:
    offenders = [
        hit for path in sorted((ROOT / package).rglob("*.py")) for hit in _private_imports(path)
    ]
    assert offenders == []
