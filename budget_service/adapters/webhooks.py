"""HTTP POSTs of webhook alerts: aiohttp on the event loop, each bounded by a total deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType

import aiohttp

# What a failed POST may raise: the network (OSError; TimeoutError, the total deadline, is one)
# or a broken answer (aiohttp's errors).
POST_ERRORS: tuple[type[BaseException], ...] = (OSError, aiohttp.ClientError)
_MAX_ANSWER_BYTES = 64 * 1024  # read (and dropped) before the connection closes


class Sender:
    """The POSTs of one notify process. Nothing is shared between webhooks but the event
    loop: no thread pool, no connection pool limit (each POST has its own connection, closed
    after it), so one tenant's slow receivers hold only their own webhooks' POSTs. Each
    webhook has at most one POST in flight (its follower delivers in the stream's order), so
    the sockets open at once are at most the number of webhooks."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Sender:
        # limit=0: no process-wide cap for one tenant's hung POSTs to fill; force_close: no
        # keep-alive pool either. Proxies from the environment are not used (trust_env=False).
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None), trust_env=False
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: float,
    ) -> int:
        """The receiver's status code; POST_ERRORS when there was none. `deadline` (seconds)
        bounds the whole POST: connecting, sending and the whole answer (TimeoutError after
        it; the connection is closed). Redirects are not followed (a 3xx is a failed
        delivery). Cancelling it (a stop) closes the connection at once."""
        assert self._session is not None, "post() only inside `async with Sender()`"
        async with asyncio.timeout(deadline):
            async with self._session.post(
                url, data=body, headers=dict(headers), allow_redirects=False
            ) as answer:
                left = _MAX_ANSWER_BYTES  # the whole answer (up to this much), in time
                while left > 0 and (chunk := await answer.content.read(left)):
                    left -= len(chunk)
                return answer.status
