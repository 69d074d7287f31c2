"""The committed generated code is exactly what `make proto` produces from proto/."""

from __future__ import annotations

from pathlib import Path

from servicekit.protogen import generate

ROOT = Path(__file__).resolve().parents[2]


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    generate(tmp_path)
    fresh, committed = files(tmp_path), files(ROOT / "gen" / "python")
    assert sorted(fresh) == sorted(committed), "run `make proto` and commit gen/python"
    drifted = [name for name in fresh if fresh[name] != committed[name]]
    assert not drifted, f"run `make proto` and commit gen/python: {drifted}"
