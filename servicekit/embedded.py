"""Embedded PostgreSQL (pgserver, a pip-installed server) for machines without a database."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """One handle on a pgserver data directory; the server stops when the last handle closes."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._server: Any = None

    def start(self) -> str:
        """Starts (or joins) the server and returns its connection URL."""
        import pgserver  # imported lazily: only the embedded path needs it

        # pgserver creates the data directory itself (initdb wants it private, 0700) and, when we
        # are root, hands it to an unprivileged user; only the parent must exist.
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        url = str(self._server.get_uri())
        log.info("embedded postgres started", extra={"data_dir": str(self.data_dir)})
        return url

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.cleanup()
            log.info("embedded postgres stopped", extra={"data_dir": str(self.data_dir)})

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
