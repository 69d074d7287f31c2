"""Several worker processes of one service sharing its port (SO_REUSEPORT), one supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from servicekit.settings import SettingsError, parse_address


def worker_env(
    base: Mapping[str, str], service: str, index: int, database_url: str
) -> dict[str, str]:
    """Worker `index` listens on the shared gRPC port and on metrics port + index."""
    env = dict(base)
    prefix = f"RATION_{service.upper()}"
    env["RATION_WORKERS"] = "1"
    env["RATION_DATABASE_URL"] = database_url
    metrics = env.get(f"{prefix}_METRICS_LISTEN", "")
    if metrics and metrics.lower() != "off":
        host, port = parse_address(f"{prefix}_METRICS_LISTEN", metrics)
        env[f"{prefix}_METRICS_LISTEN"] = f"{host}:{port + index if port else 0}"
    return env


def supervise(service: str, workers: int, database_url: str, listen: str) -> int:
    """Starts `workers` copies of `ration <service> serve`, forwards SIGINT/SIGTERM, reaps them."""
    if listen.endswith(":0"):
        raise SettingsError(
            f"RATION_WORKERS={workers} needs a fixed port in RATION_{service.upper()}_LISTEN"
        )
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "servicekit.cli", service, "serve"],
            env=worker_env(os.environ, service, index, database_url),
        )
        for index in range(workers)
    ]
    stopping = False

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while any(child.poll() is None for child in children):
        if not stopping and any(child.poll() not in (None, 0) for child in children):
            forward(
                signal.SIGTERM, None
            )  # one worker died: stop the rest, let the platform restart
        time.sleep(0.2)
    return max((child.returncode or 0) for child in children)
