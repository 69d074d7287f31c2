"""The framework integrations are optional: importing the client imports none of them, and each
integration imports its own framework only."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = ("agents", "langgraph", "langchain_core", "pydantic_ai")


def loaded_after(statement: str) -> list[str]:
    code = f"import sys; {statement};print(' '.join(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_importing_the_client_imports_no_framework() -> None:
    assert loaded_after("import ration_client, ration_client.integrations") == []


@pytest.mark.parametrize(
    ("module", "frameworks"),
    [
        ("ration_client.integrations.agents_session", []),
        ("ration_client.integrations.agents", ["agents"]),
        ("ration_client.integrations.langgraph", ["langgraph", "langchain_core"]),
        ("ration_client.integrations.pydantic_ai", ["pydantic_ai"]),
    ],
)
def test_each_integration_imports_its_own_framework_only(
    module: str, frameworks: list[str]
) -> None:
    assert sorted(loaded_after(f"import {module}")) == sorted(frameworks)
