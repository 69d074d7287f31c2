"""Several worker processes of one service sharing its port (SO_REUSEPORT), one supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from servicekit.ports import check_free, listen_variables
from servicekit.settings import ServerSettings, SettingsError, parse_address


class Stopping(Protocol):
    requested: bool


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


def check_ports(service: str, workers: int, settings: ServerSettings) -> None:
    """Before any worker starts: no other process may hold the gRPC port the workers will share
    (they alone set SO_REUSEPORT), nor any worker's metrics port."""
    grpc_variable, metrics_variable = listen_variables(service)
    if settings.port == 0:
        raise SettingsError(f"RATION_WORKERS={workers} needs a fixed port in {grpc_variable}")
    check_free(grpc_variable, settings.host, settings.port)
    if settings.metrics_host is not None and settings.metrics_port:
        for index in range(workers):
            check_free(metrics_variable, settings.metrics_host, settings.metrics_port + index)


def supervise(
    command: Sequence[str], service: str, workers: int, database_url: str, stop: Stopping
) -> int:
    """Starts `workers` copies of `command` (the caller's: one worker of `service` on the
    shared port), passes a stop on as SIGTERM (and stops all when one dies, for the platform to
    restart), reaps them. Not the main thread: `stop` is set by the caller's signal handling."""
    children = [
        subprocess.Popen(
            list(command),
            env=worker_env(os.environ, service, index, database_url),
        )
        for index in range(workers)
    ]
    forwarded = False
    while any(child.poll() is None for child in children):
        failed = any(child.poll() not in (None, 0) for child in children)
        if not forwarded and (stop.requested or failed):
            forwarded = True
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    codes = [child.returncode or 0 for child in children]
    if stop.requested:
        # A worker that had already stopped on the terminal's Ctrl-C may meet the forwarded
        # SIGTERM while its interpreter is finalizing (default handlers again): still clean.
        codes = [0 if code in (-signal.SIGTERM, -signal.SIGINT) else code for code in codes]
    return max(codes, key=abs)
