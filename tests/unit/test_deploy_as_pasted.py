"""The image installs with requirements.lock as constraints; compose needs Compose v2."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def installs() -> list[list[str]]:
    """Every `pip install` of the Dockerfile, as argument lists (continuations joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        if line.strip().upper().startswith("RUN "):
            for command in line.strip()[4:].split("&&"):
                words = shlex.split(command)
                if "pip" in " ".join(words[:1]) and words[1:2] == ["install"]:
                    found.append(words)
    return found


def test_ration_is_installed_with_the_lock_as_constraints() -> None:
    (ration,) = [words for words in installs() if "." in words[2:]]
    flags = " ".join(ration)
    assert re.search(r"(--constraint|-c)[ =]requirements\.lock\b", flags), flags
    copied = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("COPY ")]
    assert any("requirements.lock" in line.split()[1:-1] for line in copied)
    assert not (ROOT / ".dockerignore").read_text().count("requirements.lock")


def test_the_readmes_say_compose_v2_for_the_reason_the_file_has() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "name" in compose  # the Compose Specification's, which 1.x rejects
    assert "version" not in compose
    for readme in (ROOT / "README.md", ROOT / "deploy" / "README.md"):
        text = " ".join(readme.read_text().split())
        assert "Docker Compose v2" in text, readme
        assert "top-level `name`" in text, readme
