"""The README's configuration table names every variable the services read, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("servicekit", "budget_service", "memory_service", "ration_server")
# Read through a prefix (f"{prefix}_LISTEN") or by the client and CLI, documented elsewhere.
CLIENT_ONLY = {"RATION_TOKEN", "RATION_BUDGET_ADDRESS", "RATION_MEMORY_ADDRESS"}


def _read_by_code() -> set[str]:
    found: set[str] = set()
    for package in SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            found |= set(re.findall(r'"(RATION_[A-Z0-9_]+|DATABASE_URL)"', text))
            for suffix in re.findall(r'f"\{prefix\}(_[A-Z0-9_]+)"', text):
                found |= {f"RATION_BUDGET{suffix}", f"RATION_MEMORY{suffix}"}
    return found - CLIENT_ONLY


def _documented() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_variable_the_services_read_is_in_the_configuration_table() -> None:
    read = _read_by_code()
    assert {"RATION_MEMORY_EMBEDDER", "RATION_BUDGET_LISTEN"} <= read  # the scan works
    assert read - _documented() == set()


def test_the_table_documents_nothing_the_services_do_not_read() -> None:
    assert _documented() - _read_by_code() == set()
