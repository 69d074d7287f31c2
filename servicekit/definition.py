"""What a service hands the composition root: its name, settings, migrations and app factory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from servicekit.settings import DatabaseSettings, Env, ServerSettings

if TYPE_CHECKING:
    from servicekit.migrations import MigrationSet
    from servicekit.server import AppFactory, ServiceRunner


class ServiceSettings(Protocol):
    """A service's settings, as far as servicekit reads them."""

    @property
    def server(self) -> ServerSettings: ...

    @property
    def database(self) -> DatabaseSettings: ...


SettingsT = TypeVar("SettingsT", bound=ServiceSettings)


@dataclass(frozen=True)
class Configured:
    """A service configured from one environment, not yet started: its server and database
    settings (checked before Postgres starts) and the factory of its app."""

    name: str
    server: ServerSettings
    database: DatabaseSettings
    factory: AppFactory

    def runner(self, database_url: str, *, reuse_port: bool = False) -> ServiceRunner:
        from servicekit.db import Database
        from servicekit.server import ServiceRunner

        return ServiceRunner(
            self.factory, self.server, Database(database_url, self.database), reuse_port=reuse_port
        )


@dataclass(frozen=True)
class ServiceDefinition(Generic[SettingsT]):
    """One service, as its package exports it (`<service>/definition.py`): servicekit and the
    composition root build it from this alone and import nothing else of the service."""

    name: str  # as in `ration <name> serve` and the RATION_<NAME>_* variables
    service_name: str  # the gRPC service's full name (health, reflection)
    migrations: Sequence[MigrationSet]
    settings: Callable[[Env], SettingsT]  # from the environment, validated
    # (settings) -> AppFactory; a service with heavy adapters also takes them as a second
    # argument with a production default (tests hand in instances shared by the session).
    factory: Callable[..., AppFactory]

    def configure(self, env: Env, adapters: Any = None) -> Configured:
        """Configured from `env`; `adapters` (the service's own type) replace its default
        heavy adapters, and None keeps them."""
        settings = self.settings(env)
        built = self.factory(settings) if adapters is None else self.factory(settings, adapters)
        return Configured(self.name, settings.server, settings.database, built)


AnyDefinition = ServiceDefinition[Any]
