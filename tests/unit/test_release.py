"""Releases (DESIGN 6): one version, printed by `ration --version`, the newest release of
CHANGELOG.md, each release naming the commit it was cut from."""

from __future__ import annotations

import re
import tomllib

import pytest

from ration_server import __version__
from ration_server.cli import main
from tests.support.releases import ROOT, UNRELEASED, releases


def test_ration_version_prints_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"ration {__version__}\n"


def test_the_version_has_one_source_and_is_the_newest_release() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "ration_server.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert releases()[0].version == __version__


def test_every_release_names_its_commit_and_only_the_newest_may_be_unreleased() -> None:
    found = releases()
    assert [r.version for r in found][-1] == "0.1.0"
    assert found[-1].commit == "fa194cdc8667d8e4fd8322d58442b15b12fc43df"
    for release in found[1:]:
        assert re.fullmatch(r"[0-9a-f]{40}", release.commit), release
    assert found[0].commit == UNRELEASED or re.fullmatch(r"[0-9a-f]{40}", found[0].commit)
    versions = [tuple(int(p) for p in r.version.split(".")) for r in found]
    assert versions == sorted(versions, reverse=True)
    assert len(set(versions)) == len(versions)


def test_a_release_without_its_commit_line_is_refused() -> None:
    with pytest.raises(AssertionError, match="0.3.0"):
        releases("## 0.3.0\n\nNo commit here.\n\n## 0.2.0\n\nCommit: unreleased\n")
