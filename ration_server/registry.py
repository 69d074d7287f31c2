"""The registry of both service definitions: the one "kind → settings → factory → runner".

The CLI, the tests and the bench build servers through it. A definition is imported when first
asked for, so the CLI's first imports stay light (see ration_server/cli.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from servicekit.settings import Env

if TYPE_CHECKING:
    from servicekit.definition import AnyDefinition, Configured
    from servicekit.migrations import MigrationSet
    from servicekit.server import ServiceRunner


def _budget() -> AnyDefinition:
    from budget_service.definition import DEFINITION

    return DEFINITION


def _memory() -> AnyDefinition:
    from memory_service.definition import DEFINITION

    return DEFINITION


_DEFINITIONS: dict[str, Callable[[], AnyDefinition]] = {"budget": _budget, "memory": _memory}
# In the order `ration up` starts them and `ration migrate` migrates them.
SERVICES: tuple[str, ...] = tuple(_DEFINITIONS)


def definition(kind: str) -> AnyDefinition:
    """The definition of service `kind` ('budget' or 'memory')."""
    try:
        return _DEFINITIONS[kind]()
    except KeyError:
        raise ValueError(f"no service named {kind!r}; known: {', '.join(SERVICES)}") from None


def configure(kind: str, env: Env, adapters: object = None) -> Configured:
    """Service `kind` configured from `env` (its settings validated), not yet started; with
    `adapters` (e.g. memory_service.definition.Adapters) instead of its default heavy ones."""
    return definition(kind).configure(env, adapters)


def build_runner(
    kind: str,
    env: Env,
    database_url: str | None = None,
    *,
    reuse_port: bool = False,
    adapters: object = None,
) -> ServiceRunner:
    """A runner of service `kind` configured from `env`, connected to `database_url` (default:
    RATION_DATABASE_URL as `env` sets it); `adapters` as in `configure`."""
    configured = configure(kind, env, adapters)
    url = database_url or configured.database.url
    if not url:
        raise ValueError(f"{kind}: no database URL (RATION_DATABASE_URL is unset)")
    return configured.runner(url, reuse_port=reuse_port)


def all_migrations() -> list[MigrationSet]:
    """Every service's migrations, in the registry's order."""
    return [m for kind in SERVICES for m in definition(kind).migrations]


def worker_command(kind: str) -> list[str]:
    """How the supervisor of RATION_WORKERS > 1 starts one worker of service `kind`."""
    return [sys.executable, "-m", "ration_server.cli", kind, "serve", "--shared-port"]
