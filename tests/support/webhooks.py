"""A webhook receiver on loopback for `ration notify` tests: http.server on its own thread."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT_SECONDS = 30  # a bound on a hang, not a speed assertion
DRIP_EVERY = 0.2  # a dripping answer sends one byte this often (each read gets a byte)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered; 0: the sender closed the connection first
    started: float  # time.monotonic() when the POST arrived, and when its answer ended
    ended: float

    @property
    def delivery_id(self) -> str:
        return self.headers["X-Ration-Delivery"]

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        """Both signatures are this secret's: the deprecated one of the body alone, and
        `t=<unix>,v1=<hex of "t.body">` with t within the replay window of now."""
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(self.headers["X-Ration-Signature"], expected):
            return False
        fields = dict(p.split("=", 1) for p in self.headers["Ration-Signature"].split(","))
        if abs(time.time() - int(fields["t"])) > 300:
            return False
        signed = fields["t"].encode() + b"." + self.body
        mac = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return hmac.compare_digest(fields["v1"], mac)


class Receiver:
    """Records every POST; answers 500 to the first `failures` of them, then 200. A POST to a
    path in `drip` (all paths with "*") gets its answer one byte every DRIP_EVERY seconds, for
    `drip_seconds` (forever: until the sender gives up or the receiver closes), the first
    `drips` of them (every one when None)."""

    def __init__(
        self,
        failures: int = 0,
        *,
        drip: tuple[str, ...] = (),
        drip_seconds: float = 3600.0,
        drips: int | None = None,
    ) -> None:
        self.failures = failures
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._arrived = 0
        self._dripped = 0
        self._closing = threading.Event()
        # Per delivery id: POSTs of it in flight now, and the most there ever were at once.
        self._in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                started = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items()}
                delivery = headers.get("X-Ration-Delivery", "")
                with receiver._lock:
                    status = 500 if receiver._arrived < receiver.failures else 200
                    receiver._arrived += 1
                    dripping = receiver._drips_now(self.path)
                    flying = receiver._in_flight.get(delivery, 0) + 1
                    receiver._in_flight[delivery] = flying
                    most = max(receiver.most_in_flight.get(delivery, 0), flying)
                    receiver.most_in_flight[delivery] = most
                try:
                    if dripping and not receiver._drip(self):
                        status = 0
                    else:
                        self.send_response(status)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                except OSError:
                    status = 0
                with receiver._lock:
                    receiver._in_flight[delivery] -= 1
                    got = Received(self.path, headers, body, status, started, time.monotonic())
                    receiver._received.append(got)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._drip_paths = drip
        self._drip_seconds = drip_seconds
        self._drips = drips
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _drips_now(self, path: str) -> bool:
        """Whether this POST drips (under the lock)."""
        if "*" not in self._drip_paths and path not in self._drip_paths:
            return False
        if self._drips is not None and self._dripped >= self._drips:
            return False
        self._dripped += 1
        return True

    def _drip(self, handler: BaseHTTPRequestHandler) -> bool:
        """A status line, then a header one byte at a time; True when it was all sent, False
        as soon as the sender closes the connection (seen at once: the socket turns readable
        at its end) or the receiver closes."""
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
        handler.wfile.flush()
        end = time.monotonic() + self._drip_seconds
        while time.monotonic() < end and not self._closing.is_set():
            readable, _, _ = select.select([handler.connection], [], [], DRIP_EVERY)
            if readable and handler.connection.recv(1, socket.MSG_PEEK) == b"":
                return False  # the sender is gone
            handler.wfile.write(b"a")
            handler.wfile.flush()
        if self._closing.is_set():
            return False
        handler.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")
        return True

    def in_flight(self) -> int:
        """POSTs being answered now."""
        with self._lock:
            return sum(self._in_flight.values())

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    @property
    def received(self) -> list[Received]:
        """Every POST answered or cut off, in the order they arrived (a handler thread records
        its POST after answering it, so the next POST's thread may record first)."""
        with self._lock:
            return sorted(self._received, key=lambda r: r.started)

    def accepted(self, path: str | None = None) -> list[Received]:
        return [r for r in self.received if r.status == 200 and path in (None, r.path)]

    async def wait_accepted(self, count: int, path: str | None = None) -> list[Received]:
        """Until `count` POSTs (to `path`) were answered 200; a bounded wait."""
        for _ in range(WAIT_SECONDS * 100):
            found = self.accepted(path)
            if len(found) >= count:
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(f"{len(self.accepted(path))} of {count} deliveries arrived")

    async def wait_received(self, count: int) -> list[Received]:
        """Until `count` POSTs were answered (or cut off by the sender); a bounded wait."""
        for _ in range(WAIT_SECONDS * 100):
            found = self.received
            if len(found) >= count:
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(f"{len(self.received)} of {count} POSTs ended")

    async def wait_in_flight(self, count: int = 1) -> None:
        """Until `count` POSTs are being answered at once; a bounded wait."""
        for _ in range(WAIT_SECONDS * 100):
            if self.in_flight() >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{self.in_flight()} of {count} POSTs in flight")


def ids(received: list[Received]) -> Iterator[str]:
    return (r.delivery_id for r in received)
