"""The environment `make test` built is exactly requirements.lock, and the lock covers pyproject."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Installed by venv/pip themselves, or the project under test: not dependencies to pin.
NOT_PINNED = {"pip", "setuptools", "wheel", "ration"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"requirements.lock: {line!r} is not an exact pin"
        pins[_normalise(name)] = version.strip()
    return pins


def test_every_installed_distribution_is_the_locked_version() -> None:
    locked = _locked()
    installed = {_normalise(d.metadata["Name"]): d.version for d in metadata.distributions()}
    drift = {
        name: (version, locked.get(name))
        for name, version in installed.items()
        if name not in NOT_PINNED and locked.get(name) != version
    }
    assert drift == {}, "installed (version, locked) differ; run make lock or make venv"


def _declared(project: dict[str, Any]) -> list[str]:
    """The base dependencies and the dev extra's, with the extras dev names of the project
    itself (`ration[openai,...]`) expanded."""
    extras = project["optional-dependencies"]
    declared = list(project["dependencies"])
    for spec in extras["dev"]:
        own = re.fullmatch(r"ration\[([a-z0-9_,-]+)\]", spec)
        if own is None:
            declared.append(spec)
        else:
            for extra in own.group(1).split(","):
                declared.extend(extras[extra])
    return declared


def test_every_declared_dependency_is_locked() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _declared(project)
    names = {_normalise(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in declared}
    missing = names - set(_locked())
    assert missing == set(), f"pyproject dependencies missing from requirements.lock: {missing}"
