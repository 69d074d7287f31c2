"""Settings from RATION_* environment variables: parsed once at start, validated, frozen."""

from __future__ import annotations

import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A configuration problem; the message names the variable so an operator can fix it."""


class Env:
    """Typed reads of one environment mapping, each failing with the variable's name."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        return value if value not in (None, "") else None

    def text(self, name: str, default: str) -> str:
        return self.raw(name) or default

    def optional_text(self, name: str) -> str | None:
        return self.raw(name)

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        value = self._parse(name, default, int, "an integer")
        if minimum is not None and value < minimum:
            raise SettingsError(f"{name}={value} is invalid: must be >= {minimum}")
        return value

    def optional_integer(self, name: str, *, minimum: int | None = None) -> int | None:
        if self.raw(name) is None:
            return None
        return self.integer(name, 0, minimum=minimum)

    def flag(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        if raw is None:
            return default
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{name}={raw!r} is invalid: expected true or false")

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.text(name, default).strip().lower()
        if value not in choices:
            raise SettingsError(
                f"{name}={value!r} is invalid: expected one of {', '.join(choices)}"
            )
        return value

    def path(self, name: str) -> Path | None:
        raw = self.raw(name)
        return Path(raw) if raw else None

    def _parse(self, name: str, default: T, parse: Callable[[str], T], what: str) -> T:
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            return parse(raw.strip())
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is invalid: expected {what}") from None


def parse_address(name: str, value: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets) → (host, port), or a SettingsError naming the variable."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise SettingsError(f"{name}={value!r} is invalid: expected host:port")
    return host.strip("[]"), int(port_text)


POSTGRES_SCHEMES = ("postgresql", "postgres")


def postgres_url(name: str, value: str) -> str:
    """A `postgresql://` URL as asyncpg reads it, or a SettingsError naming the variable (never
    echoing the value: it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        parts.port  # noqa: B018 - parsing the port is the check (a ValueError when not a number)
    except ValueError as exc:
        raise SettingsError(f"{name} is invalid: not a URL ({exc})") from None
    if parts.scheme not in POSTGRES_SCHEMES:
        raise SettingsError(
            f"{name} is invalid: expected postgresql://user:password@host:port/database"
            f" (scheme {parts.scheme!r})"
        )
    return value.strip()


def postgres_target(url: str) -> str:
    """`host:port/database` of a Postgres URL, for messages: never its user or password."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    host = parts.hostname or query.get("host", ["localhost"])[0]
    try:
        port = parts.port or int(query.get("port", ["5432"])[0])
    except ValueError:
        port = 5432
    database = parts.path.lstrip("/") or query.get("dbname", [parts.username or ""])[0]
    return f"{host}:{port}/{database}"


# What a gRPC client receives unless configured otherwise (grpc.max_receive_message_length).
DEFAULT_CLIENT_RECEIVE_BYTES = 4 * 1024 * 1024
RESPONSE_MARGIN_BYTES = 64 * 1024

Resolver = Callable[[str], list[str]]


def resolve_host(host: str) -> list[str]:
    """Every address `host` names (a literal names itself), as getaddrinfo resolves it."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
        return [host]
    except ValueError:
        pass  # a name, or a shorthand such as 127.1 that only getaddrinfo reads
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def _is_loopback_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.partition("%")[0])  # without an IPv6 zone
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def non_loopback(host: str, resolve: Resolver = resolve_host) -> str | None:
    """Why binding `host` could reach beyond this machine, or None when every address it
    resolves to is a loopback address. A name is resolved, never judged by its spelling."""
    try:
        addresses = resolve(host)
    except (OSError, UnicodeError):
        return f"{host} does not resolve"
    outside = [a for a in addresses if not _is_loopback_address(a)]
    if not addresses or outside:
        return f"{host} resolves to {', '.join(outside) or 'nothing'}"
    return None


@dataclass(frozen=True)
class DatabaseSettings:
    """Where Postgres is; None means the embedded server under `data_dir`."""

    url: str | None
    data_dir: Path
    pool_min: int
    pool_max: int
    statement_timeout_ms: int
    acquire_timeout_seconds: float
    migrate_on_start: bool
    # Where migrations run (the owner role): `ration migrate`, and migrate-on-start; None: `url`.
    migrate_url: str | None = None
    # Serve even when the role bypasses row-level security (servicekit/dbrole.py).
    allow_privileged_role: bool = False
    # The variable `url` came from, for messages.
    url_variable: str = "RATION_DATABASE_URL"
    # Postgres ends a session of ours left idle inside a transaction this long (0: never), so
    # a stuck caller cannot hold row locks, or every tenant stream's horizon, for ever.
    idle_in_transaction_timeout_ms: int = 10_000
    # Connections of the pool one tenant's transactions may hold at once (None: no cap below
    # pool_max), so one tenant's calls cannot take every connection the others need.
    tenant_share: int | None = None

    @classmethod
    def from_env(cls, env: Env) -> DatabaseSettings:
        pool_min = env.integer("RATION_DB_POOL_MIN", 1, minimum=0)
        pool_max = env.integer("RATION_DB_POOL_MAX", 10, minimum=1)
        if pool_min > pool_max:
            raise SettingsError(
                f"RATION_DB_POOL_MIN={pool_min} is invalid: must be <= RATION_DB_POOL_MAX"
            )
        url_variable = "RATION_DATABASE_URL"
        if env.optional_text(url_variable) is None and env.optional_text("DATABASE_URL"):
            url_variable = "DATABASE_URL"
        url = env.optional_text(url_variable)
        migrate_url = env.optional_text("RATION_MIGRATE_DATABASE_URL")
        return cls(
            url=None if url is None else postgres_url(url_variable, url),
            data_dir=env.path("RATION_DATA_DIR") or Path("var/pgdata"),
            pool_min=pool_min,
            pool_max=pool_max,
            statement_timeout_ms=env.integer("RATION_DB_STATEMENT_TIMEOUT_MS", 5000, minimum=1),
            acquire_timeout_seconds=env.integer("RATION_DB_ACQUIRE_TIMEOUT_MS", 2000, minimum=1)
            / 1000,
            migrate_on_start=env.flag("RATION_MIGRATE_ON_START", True),
            migrate_url=None
            if migrate_url is None
            else postgres_url("RATION_MIGRATE_DATABASE_URL", migrate_url),
            allow_privileged_role=env.flag("RATION_ALLOW_PRIVILEGED_DB_ROLE", False),
            url_variable=url_variable,
            idle_in_transaction_timeout_ms=env.integer(
                "RATION_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 10_000, minimum=0
            ),
            tenant_share=env.optional_integer("RATION_DB_TENANT_SHARE", minimum=1),
        )


@dataclass(frozen=True)
class ServerSettings:
    """How one service listens: gRPC address, metrics address, auth and transport limits."""

    host: str
    port: int
    metrics_host: str | None
    metrics_port: int
    token_file: Path | None
    max_message_bytes: int
    max_concurrent_streams: int
    grace_seconds: float
    health_probe_seconds: float

    @property
    def dev_mode(self) -> bool:
        """No token configuration: single-tenant development, loopback only."""
        return self.token_file is None

    @property
    def max_response_bytes(self) -> int:
        """The most a response built from many entries may hold: the message limit, and never
        more than a default gRPC client receives, less room for the response's other fields."""
        limit = min(self.max_message_bytes, DEFAULT_CLIENT_RECEIVE_BYTES)
        return limit - min(RESPONSE_MARGIN_BYTES, limit // 16)

    @classmethod
    def from_env(
        cls, env: Env, service: str, default_port: int, default_metrics: int
    ) -> ServerSettings:
        prefix = f"RATION_{service.upper()}"
        listen = env.text(f"{prefix}_LISTEN", f"127.0.0.1:{default_port}")
        host, port = parse_address(f"{prefix}_LISTEN", listen)
        metrics = env.text(f"{prefix}_METRICS_LISTEN", f"127.0.0.1:{default_metrics}")
        metrics_host: str | None = None
        metrics_port = 0
        if metrics.lower() != "off":
            metrics_host, metrics_port = parse_address(f"{prefix}_METRICS_LISTEN", metrics)
        token_file = env.path("RATION_TOKEN_FILE")
        if token_file is not None and not token_file.is_file():
            raise SettingsError(f"RATION_TOKEN_FILE={token_file} is invalid: no such file")
        if token_file is not None:
            from servicekit.auth import TokenTable  # imports this module (SettingsError)

            TokenTable.load(token_file)  # a bad row stops the process before anything starts
        settings = cls(
            host=host,
            port=port,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            token_file=token_file,
            max_message_bytes=env.integer(
                "RATION_MAX_MESSAGE_BYTES", 4 * 1024 * 1024, minimum=1024
            ),
            max_concurrent_streams=env.integer("RATION_MAX_CONCURRENT_STREAMS", 1000, minimum=1),
            grace_seconds=env.integer("RATION_SHUTDOWN_GRACE_MS", 5000, minimum=0) / 1000,
            health_probe_seconds=env.integer("RATION_HEALTH_PROBE_MS", 1000, minimum=50) / 1000,
        )
        if settings.dev_mode:
            binds = [(f"{prefix}_LISTEN", listen, host)]
            if metrics_host is not None:  # /metrics holds the dev tenant's counters too
                binds.append((f"{prefix}_METRICS_LISTEN", metrics, metrics_host))
            for variable, value, bind_host in binds:
                outside = non_loopback(bind_host)
                if outside is not None:
                    raise SettingsError(
                        f"{variable}={value!r} is refused: without RATION_TOKEN_FILE the server "
                        f"runs in development mode and binds only loopback addresses ({outside}); "
                        f"configure tokens to bind {bind_host}"
                    )
        return settings
