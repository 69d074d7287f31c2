"""The machine description printed with every result: CPUs, memory, versions, load."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

import grpc


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def describe(postgres_version: str, postgres_source: str) -> dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "grpcio": grpc.__version__,
        "postgres": postgres_version,
        "postgres_source": postgres_source,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
