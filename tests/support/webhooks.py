"""A webhook receiver on loopback for `ration notify` tests: http.server on its own thread."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT_SECONDS = 30  # a bound on a hang, not a speed assertion


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered

    @property
    def delivery_id(self) -> str:
        return self.headers["X-Ration-Delivery"]

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers["X-Ration-Signature"], expected)


class Receiver:
    """Records every POST; answers 500 to the first `failures` of them, then 200."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self._lock = threading.Lock()
        self._received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    status = 500 if len(receiver._received) < receiver.failures else 200
                    headers = {k: v for k, v in self.headers.items()}
                    receiver._received.append(Received(self.path, headers, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

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


def ids(received: list[Received]) -> Iterator[str]:
    return (r.delivery_id for r in received)
