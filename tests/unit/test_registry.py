"""The composition root: one registry of service definitions; servicekit is handed them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ration_server import registry
from servicekit.settings import Env, SettingsError
from tests.support import adapters

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", registry.SERVICES)
def test_each_service_is_built_from_its_one_definition(kind: str) -> None:
    definition = registry.definition(kind)
    env = Env({"RATION_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    configured = registry.configure(kind, env)
    runner = registry.build_runner(kind, env, adapters=adapters.for_service(kind))
    assert definition.name == configured.name == runner.app.name == kind
    assert runner.app.service_name == definition.service_name
    assert list(runner.app.migrations) == list(definition.migrations)
    assert runner.database.url == "postgresql://nobody@127.0.0.1:1/none"


def test_the_registry_lists_every_migration_once_in_service_order() -> None:
    schemas = [m.schema for m in registry.all_migrations()]
    assert schemas == ["budget", "memory"]


def test_an_unknown_service_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'ledger'"):
        registry.definition("ledger")


def test_settings_errors_surface_from_the_definition() -> None:
    with pytest.raises(SettingsError, match="RATION_MEMORY_MAX_ACTIVE_ENTRIES"):
        registry.configure("memory", Env({"RATION_MEMORY_MAX_ACTIVE_ENTRIES": "0"}))


def test_servicekit_names_no_service_and_not_the_composition_root() -> None:
    # import-linter checks imports; this also catches module paths written as strings.
    pattern = re.compile(r"\b(ration_server|budget_service|memory_service)\.")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "servicekit").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
