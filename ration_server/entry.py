"""The `ration` console script: the Ctrl-C handler first, every other import after it."""

from __future__ import annotations

import sys

from servicekit.shutdown import STOP


def main() -> int:
    STOP.install()  # from here on a signal only sets a flag (see servicekit.shutdown)
    from ration_server.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
