"""HTTP POSTs of webhook alerts: the standard library's http.client, in a worker thread."""

from __future__ import annotations

import asyncio
import http.client
import ssl
import urllib.parse
from collections.abc import Mapping

# What a failed POST may raise: the network (OSError, timeouts included) or a broken answer.
POST_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)
_MAX_ANSWER_BYTES = 64 * 1024  # read (and dropped) so the connection closes cleanly


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", target, body=body, headers=dict(headers))
        answer = conn.getresponse()
        answer.read(_MAX_ANSWER_BYTES)
        return answer.status
    finally:
        conn.close()


async def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:  # noqa: ASYNC109
    """The receiver's status code; POST_ERRORS when there was none. Redirects are not
    followed (a 3xx is a failed delivery). `timeout` bounds each socket operation of the
    thread (asyncio.timeout could not stop a blocking call)."""
    return await asyncio.to_thread(_post, url, body, headers, timeout)
