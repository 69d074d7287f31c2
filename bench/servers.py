"""Server subprocesses started as users start them: `ration <svc> serve` and the echo server."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.database import BenchDatabase
from bench.echo import METHOD as ECHO_METHOD
from bench.meter import metric_totals
from ration_server import registry

# What every worker prints once serving (counted, not parsed by line: workers share one log).
READY = "ready: "
HANDLED = "grpc_server_handled_total"

ROOT = Path(__file__).resolve().parent.parent


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - count)
        if all(_bindable(base + i) for i in range(count)):
            return base
    raise OSError(f"no {count} consecutive free ports")


@dataclass
class ServerProcess:
    """A process group we started; its output goes to `log`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    address: str
    workers: int
    metrics_base: int = 0  # worker i serves /metrics on metrics_base + i; 0 = none

    def _metrics_texts(self) -> list[str] | None:
        """Each worker's /metrics exposition, or None (no metrics, or a worker did not answer)."""
        if not self.metrics_base:
            return None
        texts = []
        for i in range(self.workers):
            url = f"http://127.0.0.1:{self.metrics_base + i}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    texts.append(response.read().decode())
            except OSError:
                return None
        return texts

    def handled(self) -> list[float] | None:
        """RPCs each worker has handled so far (grpc_server_handled_total), or None."""
        texts = self._metrics_texts()
        if texts is None:
            return None
        return [metric_totals(text, [HANDLED]).get(HANDLED, 0.0) for text in texts]

    def metric_totals(self, names: Sequence[str]) -> dict[str, float] | None:
        """The named samples summed over label sets and workers (absent names left out)."""
        texts = self._metrics_texts()
        if texts is None:
            return None
        totals: dict[str, float] = {}
        for text in texts:
            for name, value in metric_totals(text, names).items():
                totals[name] = totals.get(name, 0.0) + value
        return totals

    def ready_lines(self) -> int:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return 0
        return text.count(READY)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Every worker printed its ready line, then one real call answers over gRPC."""
        deadline = time.monotonic() + timeout
        while self.ready_lines() < self.workers:
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.1)
        with grpc.insecure_channel(self.address) as channel:
            if self.name == "echo":
                channel.unary_unary(ECHO_METHOD)(b"ping", timeout=10)
                return
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                service_name = registry.definition(self.name).service_name
                request = health_pb2.HealthCheckRequest(service=service_name)
                if stub.Check(request, timeout=10).status == health_pb2.HealthCheckResponse.SERVING:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} health not SERVING:\n{self.tail()}")
                time.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM to the supervisor (it forwards to its workers); SIGKILL the group if stuck."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            return self.popen.wait(timeout=10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(
    name: str, argv: list[str], env: dict[str, str], log: Path, address: str, workers: int
) -> ServerProcess:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return ServerProcess(name, popen, log, address, workers)


def start_service(
    service: str, workers: int, database_url: str, log_dir: Path, extra_env: dict[str, str]
) -> ServerProcess:
    """`RATION_WORKERS=N ration <service> serve` on fixed free ports against `database_url`."""
    port = free_ports(1)
    metrics = free_ports(workers)
    prefix = f"RATION_{service.upper()}"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update(
        {
            "RATION_WORKERS": str(workers),
            "RATION_DATABASE_URL": database_url,
            f"{prefix}_LISTEN": f"127.0.0.1:{port}",
            f"{prefix}_METRICS_LISTEN": f"127.0.0.1:{metrics}",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
    )
    ration = Path(sys.executable).parent / "ration"
    argv = [str(ration), service, "serve"] if ration.exists() else [
        sys.executable, "-m", "ration_server.cli", service, "serve"
    ]  # fmt: skip
    address = f"127.0.0.1:{port}"
    server = _spawn(service, argv, env, log_dir / f"{service}.log", address, workers)
    server.metrics_base = metrics
    return server


def serve_database(
    service: str, workers: int, database: BenchDatabase, log_dir: Path, extra_env: dict[str, str]
) -> ServerProcess:
    """The service as deployed, ready: connected as the application role, migrating as the
    owner (database.service_env()), with `extra_env` beside; stopped if it never gets ready."""
    env = {**database.service_env(), **extra_env}
    url = env.pop("RATION_DATABASE_URL")
    server = start_service(service, workers, url, log_dir, env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def start_echo(workers: int, log_dir: Path) -> ServerProcess:
    """`python -m bench.echo --workers N` on a fixed free port."""
    port = free_ports(1)
    address = f"127.0.0.1:{port}"
    argv = [sys.executable, "-m", "bench.echo", "--listen", address, "--workers", str(workers)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return _spawn("echo", argv, env, log_dir / "echo.log", address, workers)
