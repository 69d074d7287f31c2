"""The ceiling: a trivial grpc.aio echo server (N SO_REUSEPORT workers) and its client op."""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from bench.caller import Caller, Op
from servicekit import runtime
from servicekit.logs import say

METHOD = "/bench.Echo/Echo"


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def serve(listen: str) -> None:
    """One worker: bytes in, the same bytes out, until SIGTERM or SIGINT."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
    handler = grpc.unary_unary_rpc_method_handler(_echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),)
    )
    if server.add_insecure_port(listen) == 0:
        raise OSError(f"cannot bind {listen}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    say(f"ready: echo worker listening on {listen}")
    await stop.wait()
    await server.stop(0.5)


def supervise(listen: str, workers: int) -> int:
    """Starts `workers` copies sharing the port; forwards SIGTERM/SIGINT; reaps them."""
    children = [
        subprocess.Popen([sys.executable, "-m", "bench.echo", "--listen", listen, "--worker"])
        for _ in range(workers)
    ]

    def forward(signum: int, frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while any(child.poll() is None for child in children):
        time.sleep(0.1)
    return max(child.returncode or 0 for child in children)


def echo_op(channels: Sequence[grpc.aio.Channel], params: Mapping[str, Any], index: int) -> Op:
    """The client side: one unary echo of `payload_bytes` bytes."""
    call = channels[index % len(channels)].unary_unary(METHOD)
    payload = b"x" * int(params.get("payload_bytes", 64))

    async def op(caller: Caller) -> None:
        await caller.rpc("Echo", call(payload, timeout=caller.timeout))

    return op


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("--listen", required=True, help="host:port (a fixed port)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker or args.workers == 1:
        runtime.run(serve(args.listen))
        return 0
    return supervise(args.listen, args.workers)


if __name__ == "__main__":
    sys.exit(main())
