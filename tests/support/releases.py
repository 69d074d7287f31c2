"""The releases CHANGELOG.md records, each with the commit it was cut from, and that commit's
files read from git history (the upgrade and rolling-deploy tests start from them)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
UNRELEASED = "unreleased"
# Pre-release states of main that ran `ration migrate` and must upgrade too (CHANGELOG 0.2.0):
# budget 0006 as it landed, and budget 0010 as it landed.
BROKEN_STATES = (
    "772a3ac9433bd4c33ebd102eccdfef584559e33b",
    "a79d75271b3358eed184e14d441061223ec99012",
)
_HEADING = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.M)
_COMMIT = re.compile(r"^Commit: (\S+)$", re.M)


@dataclass(frozen=True)
class Release:
    version: str
    commit: str  # a full hash, or UNRELEASED

    @property
    def cut(self) -> bool:
        return self.commit != UNRELEASED


def releases(text: str | None = None) -> list[Release]:
    """Newest first, as the changelog lists them."""
    text = CHANGELOG.read_text(encoding="utf-8") if text is None else text
    headings = list(_HEADING.finditer(text))
    found = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        commits = _COMMIT.findall(text, heading.end(), end)
        assert len(commits) == 1, f"release {heading[1]} needs one `Commit:` line"
        found.append(Release(heading[1], commits[0]))
    return found


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def history_problem(*commits: str) -> str | None:
    """Why these commits cannot be read here, or None."""
    try:
        if git("rev-parse", "--is-shallow-repository").strip() == "true":
            return "a shallow clone: fetch the full history of main to run upgrade tests"
        for commit in commits:
            git("cat-file", "-e", f"{commit}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        return f"git history with {', '.join(commits)} is not available here"
    return None


def files_at(commit: str, folder: str) -> dict[str, bytes]:
    """The files of one folder at a commit: name -> content."""
    names = git("ls-tree", "--name-only", f"{commit}:{folder}").split()
    return {
        name: subprocess.run(
            ["git", "show", f"{commit}:{folder}/{name}"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        for name in names
    }
