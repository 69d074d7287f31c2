"""Per-test clones of the migrated template, made ahead of the test and dropped behind it.

`CREATE DATABASE … TEMPLATE` takes about 0.3-0.6 s and `DROP DATABASE` (a forced checkpoint) about
1 s on a busy machine, up to 30 s under load; done inline they were most of an API test's setup
and teardown. Here a worker thread makes the next clone while a test runs and DROPPERS threads
drop the used ones after it: concurrent drops wait for the same checkpoint, so a backlog drains
at once instead of one checkpoint per database. Each test still gets a fresh database of its
own, dropped before the session ends.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from tests.support.postgres import admin

AHEAD = 1  # clones made before they are asked for (each holds a template's worth of disk)
DROPPERS = 4  # drops at once: they share the checkpoint each one forces


class Clones:
    """Fresh clones of `template` on the server at `server_url` (a superuser URL)."""

    def __init__(self, server_url: str, template: str, prefix: str = "ration_t") -> None:
        self._server_url = server_url
        self._template = template
        self._prefix = prefix
        # One thread makes clones, others drop them: a slow drop never delays the next clone.
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="clone-make")
        self._dropper = ThreadPoolExecutor(DROPPERS, thread_name_prefix="clone-drop")
        self._ahead: collections.deque[Future[str]] = collections.deque()
        self._drops: list[Future[None]] = []

    def _make(self) -> str:
        name = f"{self._prefix}_{uuid.uuid4().hex[:12]}"
        statement = f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"'
        asyncio.run(admin(self._server_url, statement))
        return name

    def _drop(self, name: str) -> None:
        asyncio.run(admin(self._server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def take(self) -> str:
        """The name of a fresh clone, no one else's; `give_back` drops it."""
        while len(self._ahead) <= AHEAD:
            self._ahead.append(self._maker.submit(self._make))
        return self._ahead.popleft().result()

    def give_back(self, name: str) -> None:
        """Drops clone `name` (or any database of the session's, e.g. an empty one made for a
        migration test) in the background (it must not be used any more)."""
        # Finished drops are forgotten, failed ones kept for `close` to raise.
        self._drops = [d for d in self._drops if not d.done() or d.exception() is not None]
        self._drops.append(self._dropper.submit(self._drop, name))

    def close(self) -> None:
        """Drops the clones made ahead and waits for every drop (raising the first failure)."""
        for made in self._ahead:
            self._drops.append(self._dropper.submit(self._drop, made.result()))
        self._ahead.clear()
        self._maker.shutdown(wait=True)
        self._dropper.shutdown(wait=True)
        for drop in self._drops:
            drop.result()
