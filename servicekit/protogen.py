"""Regenerates the committed Python protobuf code: `python -m servicekit.protogen gen/python`."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGES = ("ration/budget/v1", "ration/memory/v1")


def proto_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (PROTO_ROOT / pkg).glob("*.proto"))


def generate(out_dir: Path) -> None:
    """Runs protoc (from grpcio-tools) for every .proto and adds package __init__ files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency only

    out_dir.mkdir(parents=True, exist_ok=True)
    include = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for pkg in PACKAGES:
        parts = Path(pkg).parts
        for depth in range(1, len(parts) + 1):
            init = out_dir.joinpath(*parts[:depth], "__init__.py")
            init.write_text('"""Generated protobuf package; do not edit."""\n')


if __name__ == "__main__":
    generate(Path(sys.argv[1] if len(sys.argv) > 1 else "gen/python"))
