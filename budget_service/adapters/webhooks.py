"""HTTP POSTs of webhook alerts: aiohttp on the event loop, each bounded by a total deadline."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

# What a failed POST may raise: the network (OSError; TimeoutError, the total deadline, is one)
# or a broken answer (aiohttp's errors).
POST_ERRORS: tuple[type[BaseException], ...] = (OSError, aiohttp.ClientError)
_MAX_ANSWER_BYTES = 64 * 1024  # read (and dropped) before the connection closes
_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
Lookup = Callable[..., list[tuple[Any, ...]]]  # socket.getaddrinfo's shape


class HostResolver(AbstractResolver):
    """Name lookups on one thread per host name, not on the loop's shared executor: a tenant
    whose receivers' names resolve slowly (or never) delays only lookups of those names. The
    threads are at most the distinct host names of the webhooks file. The POST's deadline
    bounds the wait; a lookup stuck in its thread is left to finish there."""

    def __init__(self, lookup: Lookup = socket.getaddrinfo) -> None:
        self._lookup = lookup
        self._threads: dict[str, ThreadPoolExecutor] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        thread = self._threads.get(host)
        if thread is None:
            thread = self._threads[host] = ThreadPoolExecutor(1, thread_name_prefix="notify-dns")
        infos = await asyncio.get_running_loop().run_in_executor(
            thread, self._lookup, host, port, family, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG
        )
        found: list[ResolveResult] = []
        for kind, _, proto, _, address in infos:
            if kind == socket.AF_INET6 and (len(address) < 4 or address[3]):
                continue  # no IPv6 in this Python, or a link-local address (not for webhooks)
            found.append(
                ResolveResult(
                    hostname=host,
                    host=address[0],
                    port=address[1],
                    family=kind,
                    proto=proto,
                    flags=_NUMERIC,
                )
            )
        if not found:
            raise OSError(f"{host} has no usable address")
        return found

    async def close(self) -> None:
        for thread in self._threads.values():
            thread.shutdown(wait=False, cancel_futures=True)
        self._threads.clear()


class Sender:
    """The POSTs of one notify process. Nothing is shared between webhooks but the event
    loop: no shared thread pool (name lookups run per host), no connection pool limit (each
    POST has its own connection, closed after it), so one tenant's slow receivers (or slow
    names) hold only their own webhooks' POSTs. Each
    webhook has at most one POST in flight (its follower delivers in the stream's order), so
    the sockets open at once are at most the number of webhooks."""

    def __init__(self, lookup: Lookup = socket.getaddrinfo) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._resolver: HostResolver | None = None
        self._lookup = lookup

    async def __aenter__(self) -> Sender:
        # limit=0: no process-wide cap for one tenant's hung POSTs to fill; force_close: no
        # keep-alive pool either; names resolved per host (HostResolver). Proxies from the
        # environment are not used (trust_env=False).
        self._resolver = resolver = HostResolver(self._lookup)
        connector = aiohttp.TCPConnector(limit=0, force_close=True, resolver=resolver)
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
        resolver, self._resolver = self._resolver, None
        if resolver is not None:  # the connector closes only a resolver it made itself
            await resolver.close()

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
