"""A numbered migration is never edited once it is on main (DESIGN 6): each file matches the
committed checksum manifest, the manifest matches each file's first version in git history,
and the manifest only ever grows."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ration_server import registry
from servicekit.migrations import MigrationSet

ROOT = Path(__file__).resolve().parents[2]
SETS = {mset.schema: mset for mset in registry.all_migrations()}


@dataclass(frozen=True)
class Manifest:
    current: dict[int, str]  # version -> checksum of the text every database must have applied
    grandfathered: dict[int, frozenset[str]]  # earlier texts edited in place before 0.2.0
    lines: frozenset[str]


def folder(mset: MigrationSet) -> Path:
    return ROOT.joinpath(*mset.package.split("."))


def parse(text: str) -> Manifest:
    current: dict[int, str] = {}
    grandfathered: dict[int, set[str]] = {}
    lines = set()
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        lines.add(line)
        version, checksum, *tag = line.split()
        if tag and tag[0] == "grandfathered":
            grandfathered.setdefault(int(version), set()).add(checksum)
        else:
            assert int(version) not in current, f"two current lines for {version}"
            current[int(version)] = checksum
    return Manifest(current, {v: frozenset(c) for v, c in grandfathered.items()}, frozenset(lines))


def manifest(mset: MigrationSet) -> Manifest:
    return parse((folder(mset) / "CHECKSUMS").read_text(encoding="utf-8"))


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def full_history() -> None:
    """Skips the caller when the checkout has no full history to read."""
    try:
        shallow = git("rev-parse", "--is-shallow-repository").strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the manifest alone guards the migrations")
    if shallow == "true":
        pytest.skip("a shallow clone has no first versions to read: fetch with full history")


@pytest.mark.parametrize("schema", sorted(SETS))
def test_every_numbered_migration_matches_its_committed_checksum(schema: str) -> None:
    mset = SETS[schema]
    listed = manifest(mset)
    files = {m.version: m for m in mset.load()}
    assert sorted(listed.current) == sorted(files), "a migration without its manifest line"
    for version, migration in files.items():
        assert migration.checksum == listed.current[version], (
            f"{schema} migration {version:04d}_{migration.name} was edited: a migration on main "
            "is never changed, write a new one (stored functions: store/functions/)"
        )


@pytest.mark.parametrize("schema", sorted(SETS))
def test_the_grandfathered_texts_are_the_ones_the_runner_accepts(schema: str) -> None:
    mset = SETS[schema]
    assert manifest(mset).grandfathered == dict(mset.rewritten)


@pytest.mark.parametrize("schema", sorted(SETS))
def test_each_migration_is_its_first_version_on_main(schema: str) -> None:
    full_history()
    mset = SETS[schema]
    listed = manifest(mset)
    for migration in mset.load():
        path = (folder(mset) / f"{migration.version:04d}_{migration.name}.sql").relative_to(ROOT)
        added = git("log", "--first-parent", "--diff-filter=A", "--format=%H", "--", str(path))
        if not added.split():
            continue  # new in this working tree: the manifest line is all there is yet
        first = added.split()[-1]
        text = subprocess.run(
            ["git", "show", f"{first}:{path}"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        checksum = hashlib.sha256(text).hexdigest()
        allowed = {listed.current[migration.version]} | listed.grandfathered.get(
            migration.version, frozenset()
        )
        assert checksum in allowed, f"{path} differs from its first version ({first[:12]})"
        if checksum != listed.current[migration.version]:  # only a grandfathered rewrite
            assert migration.version in mset.rewritten, path


@pytest.mark.parametrize("schema", sorted(SETS))
def test_the_manifest_only_grows(schema: str) -> None:
    full_history()
    path = (folder(SETS[schema]) / "CHECKSUMS").relative_to(ROOT)
    now = manifest(SETS[schema]).lines
    for commit in git("log", "--first-parent", "--format=%H", "--", str(path)).split():
        try:
            earlier = git("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            continue  # the commit that deleted it (a test failure of its own)
        lost = parse(earlier).lines - now
        assert not lost, f"{path} lost lines it had at {commit[:12]}: {sorted(lost)}"
