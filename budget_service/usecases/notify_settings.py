"""`ration notify` configuration: RATION_NOTIFY_* variables and the webhooks file they name."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_service.domain import input_rules as v
from budget_service.domain.alerts import DEFAULT_EVENT_TYPES, BodyFormat, Webhook
from budget_service.domain.tenant_events import EVENT_TYPES, MAX_FILTER_IDS
from servicekit.labels import MetricLabels
from servicekit.settings import DatabaseSettings, Env, SettingsError, non_loopback, parse_address

WEBHOOKS_FILE = "RATION_NOTIFY_WEBHOOKS_FILE"
_KEYS = {"id", "tenant", "url", "secret", "secret_env", "events", "projects", "format"}


@dataclass(frozen=True)
class NotifySettings:
    database: DatabaseSettings
    webhooks: tuple[Webhook, ...]
    # An idle follower reads the tenant's events again after at most this long.
    poll_seconds: float
    # One POST's total time limit: connecting, sending and the whole answer.
    timeout_seconds: float
    # Retries of a failed POST: the first after this long, doubling up to the longest.
    retry_first_seconds: float
    retry_longest_seconds: float
    # How long a process's claim on a webhook lasts without renewal (it renews every third).
    lease_seconds: float
    # Where a webhook seen for the first time starts: "latest" (new events only) or
    # "earliest" (the tenant's whole history).
    start: str
    # gRPC health (grpc.health.v1) and Prometheus /metrics: (host, port), or None when "off".
    health: tuple[str, int] | None = None
    metrics: tuple[str, int] | None = None
    labels: MetricLabels = MetricLabels()

    @property
    def dev_mode(self) -> bool:
        """Development: the embedded Postgres of `make run` (no RATION_DATABASE_URL). Its role
        is the embedded server's superuser; binds are loopback only, as for the services."""
        return self.database.url is None

    @classmethod
    def from_env(cls, env: Env | None = None) -> NotifySettings:
        env = env or Env()
        path = env.path(WEBHOOKS_FILE)
        if path is None:
            raise SettingsError(f"{WEBHOOKS_FILE} is required: the JSON file of webhooks")
        lease = env.integer("RATION_NOTIFY_LEASE_SECONDS", 30, minimum=1)
        timeout_ms = env.integer("RATION_NOTIFY_TIMEOUT_MS", 10_000, minimum=1)
        if timeout_ms * 2 >= lease * 1000:
            raise SettingsError(
                f"RATION_NOTIFY_TIMEOUT_MS={timeout_ms} is invalid: must be less than half of"
                f" RATION_NOTIFY_LEASE_SECONDS ({lease} s), so a POST ends within the lease"
            )
        first_ms = env.integer("RATION_NOTIFY_RETRY_MIN_MS", 500, minimum=1)
        longest_ms = env.integer("RATION_NOTIFY_RETRY_MAX_MS", 60_000, minimum=1)
        if first_ms > longest_ms:
            raise SettingsError(
                f"RATION_NOTIFY_RETRY_MIN_MS={first_ms} is invalid: must be <="
                f" RATION_NOTIFY_RETRY_MAX_MS ({longest_ms})"
            )
        database = DatabaseSettings.from_env(env)
        dev_mode = database.url is None
        return cls(
            database=database,
            webhooks=load_webhooks(path, env),
            poll_seconds=env.integer("RATION_NOTIFY_POLL_MS", 1000, minimum=10) / 1000,
            timeout_seconds=timeout_ms / 1000,
            retry_first_seconds=first_ms / 1000,
            retry_longest_seconds=longest_ms / 1000,
            lease_seconds=float(lease),
            start=env.choice("RATION_NOTIFY_START", "latest", ("latest", "earliest")),
            health=_listen(env, "RATION_NOTIFY_LISTEN", "127.0.0.1:50053", dev_mode),
            metrics=_listen(env, "RATION_NOTIFY_METRICS_LISTEN", "127.0.0.1:9466", dev_mode),
            labels=MetricLabels.from_env(env),
        )


def _listen(env: Env, variable: str, default: str, dev_mode: bool) -> tuple[str, int] | None:
    """host:port or "off"; loopback only in development mode (the services' rule)."""
    value = env.text(variable, default)
    if value.lower() == "off":
        return None
    host, port = parse_address(variable, value)
    outside = non_loopback(host) if dev_mode else None
    if outside is not None:
        raise SettingsError(
            f"{variable}={value!r} is refused: on the embedded database (no"
            f" RATION_DATABASE_URL) ration notify runs in development mode and binds only"
            f" loopback addresses ({outside})"
        )
    return host, port


def _fail(where: str, problem: str) -> SettingsError:
    return SettingsError(f"{WEBHOOKS_FILE}: {where} {problem}")


def _strings(row: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    values = row.get(key)
    if values is None:
        return None
    if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
        raise _fail(f"{where}.{key}", "must be a list of strings")
    return tuple(values)


# Anything a request line or header cannot carry: controls (CR, LF, tab, ...), space, DEL.
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")


def _url(row: Mapping[str, Any], where: str) -> str:
    """An absolute http(s) URL that can be sent as written, refused at start otherwise (a URL
    that can never be sent would be retried forever). Credentials (`user:pw@`) are refused,
    not dropped: a receiver authenticates POSTs by their signature. Never echoed: the URL
    may itself be a credential."""
    url = row.get("url")
    if not isinstance(url, str):
        raise _fail(f"{where}.url", "must be an http:// or https:// URL with a host")
    if _UNSENDABLE.search(url):
        raise _fail(f"{where}.url", "has a space or a control character (CR, LF, tab...)")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(f"{where}.url", "must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise _fail(f"{where}.url", "has credentials (user:password@), which are refused")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise _fail(f"{where}.url", "has a port that is not a number in 1..65535")
    return url


def _secret(row: Mapping[str, Any], where: str, env: Env) -> bytes:
    """`secret` in the file, or `secret_env`: the name of a variable holding it."""
    secret, variable = row.get("secret"), row.get("secret_env")
    if (secret is None) == (variable is None):
        raise _fail(where, "needs exactly one of secret and secret_env")
    if variable is not None:
        if not isinstance(variable, str) or not variable:
            raise _fail(f"{where}.secret_env", "must name an environment variable")
        secret = env.raw(variable)
        if secret is None:
            raise _fail(f"{where}.secret_env", f"names {variable}, which is not set")
    if not isinstance(secret, str) or not secret:
        raise _fail(f"{where}.secret", "must be a non-empty string")
    return secret.encode()


def _webhook(row: Any, where: str, env: Env) -> Webhook:
    if not isinstance(row, dict):
        raise _fail(where, "must be an object")
    unknown = sorted(set(row) - _KEYS)
    if unknown:
        raise _fail(where, f"has unknown keys {', '.join(unknown)}")
    webhook_id, tenant = row.get("id"), row.get("tenant")
    if not isinstance(webhook_id, str) or v.validate_run_id(webhook_id):
        raise _fail(f"{where}.id", "must be 1..128 characters of letters, digits and . _ : -")
    if not isinstance(tenant, str) or v.validate_id(tenant, "tenant"):
        raise _fail(f"{where}.tenant", "must be 1..128 printable characters")
    events = _strings(row, "events", where)
    if events is not None and (not events or set(events) - set(EVENT_TYPES)):
        raise _fail(f"{where}.events", f"must list event types among {', '.join(EVENT_TYPES)}")
    projects = _strings(row, "projects", where) or ()
    if len(projects) > MAX_FILTER_IDS or any(v.validate_id(p, "project") for p in projects):
        raise _fail(f"{where}.projects", f"must be at most {MAX_FILTER_IDS} project ids")
    body = row.get("format", BodyFormat.JSON.value)
    if body not in tuple(BodyFormat):
        raise _fail(f"{where}.format", "must be json or slack")
    return Webhook(
        id=webhook_id,
        tenant=tenant,
        url=_url(row, where),
        secret=_secret(row, where, env),
        event_types=events or DEFAULT_EVENT_TYPES,
        project_ids=projects,
        format=BodyFormat(body),
    )


def load_webhooks(path: Path, env: Env) -> tuple[Webhook, ...]:
    """`{"webhooks": [{"id", "tenant", "url", "secret" | "secret_env", "events"?, "projects"?,
    "format"?}]}`, read strictly; errors name the entry, never a URL or secret."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise SettingsError(f"{WEBHOOKS_FILE}={path}: cannot read it ({exc.strerror})") from None
    except ValueError:
        raise SettingsError(f"{WEBHOOKS_FILE}={path}: not valid JSON") from None
    rows = document.get("webhooks") if isinstance(document, dict) else None
    if not isinstance(rows, list) or not rows:
        raise SettingsError(f'{WEBHOOKS_FILE}={path}: expected {{"webhooks": [ ... ]}}')
    found = tuple(_webhook(row, f"webhooks[{i}]", env) for i, row in enumerate(rows))
    keys = [(w.tenant, w.id) for w in found]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise _fail(f"webhooks[{i}]", f"repeats webhook id {key[1]!r} of tenant {key[0]!r}")
    return found
