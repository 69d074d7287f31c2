"""Bearer-token authentication: tokens (stored as SHA-256 digests) map to a tenant and roles."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servicekit.errors import DomainError, ErrorKind
from servicekit.settings import SettingsError

ROLES = ("reader", "writer", "admin", "approver")
# Each role includes the ones before it: a writer may read, an admin may write. `approver`
# (ResumeRun approvals) includes no other role; admin includes it too.
_RANK = {role: index for index, role in enumerate(ROLES[:3])}
DEV_TENANT = "dev"
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


def _grants(held: str, role: str) -> bool:
    if held in (role, "admin"):
        return True
    return held in _RANK and role in _RANK and _RANK[held] >= _RANK[role]


@dataclass(frozen=True)
class Identity:
    tenant: str
    roles: frozenset[str]
    # Who the caller is, as recorded (e.g. as a ResumeRun approver): never the token itself.
    principal: str = ""
    # The issued API key the caller presented (its id, never the key); empty for a token of
    # the token file and in development mode.
    key_id: str = ""

    @functools.cached_property
    def _grants_role(self) -> dict[str, bool]:
        """Whether this identity holds each role asked so far (roles come from code, so few):
        the check of every call, once per identity."""
        return {}

    def require(self, role: str) -> None:
        granted = self._grants_role.get(role)
        if granted is None:
            granted = self._grants_role[role] = any(_grants(r, role) for r in self.roles)
        if not granted:
            raise DomainError(
                ErrorKind.FORBIDDEN,
                "ROLE_REQUIRED",
                f"this call needs the {role} role",
                metadata={"role": role},
            )


# A service's access table: full method name ("/pkg.Service/Method") → the role it needs, or
# None for any authenticated caller whatever its roles (e.g. GetCapabilities). The auth
# interceptor enforces it before the handler runs; authorization that depends on the request
# or on stored data stays in the use case that knows it.
RoleTable = Mapping[str, str | None]


def check_role_table(service: str, table: RoleTable, methods: Iterable[str]) -> None:
    """Fail closed at startup: every method the service registers needs a row, every row a
    registered method, and every role must be one of ROLES."""
    registered = frozenset(methods)
    missing = sorted(registered - table.keys())
    stale = sorted(table.keys() - registered)
    unknown = sorted(f"{m}={r}" for m, r in table.items() if r is not None and r not in ROLES)
    problems = [
        *(f"{m} has no required role" for m in missing),
        *(f"{m} is not a registered method" for m in stale),
        *(f"{row} names an unknown role" for row in unknown),
    ]
    if problems:
        raise SettingsError(f"the {service} service's role table is wrong: {'; '.join(problems)}")


DEV_IDENTITY = Identity(DEV_TENANT, frozenset(ROLES), DEV_TENANT)
identity_var: contextvars.ContextVar[Identity] = contextvars.ContextVar("identity")


def current_identity() -> Identity:
    """The authenticated caller of the RPC being served (set by the call interceptor)."""
    return identity_var.get()


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


MAX_TENANT_CHARS = 128


def _identity_of(row: object, index: int) -> tuple[str, Identity]:
    """One token row → (digest, identity), or a ValueError naming the row and its fault."""
    where = f"tokens[{index}]"
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not an object")
    sha = row.get("sha256")
    if not isinstance(sha, str) or not _HEX_DIGEST.fullmatch(sha):
        raise ValueError(f"{where}.sha256 must be the 64 hex digits of the token's SHA-256")
    tenant = row.get("tenant")
    # Tenants reach Postgres (which cannot hold NUL), logs and labels: printable and bounded.
    if (
        not isinstance(tenant, str)
        or not tenant.strip()
        or len(tenant) > MAX_TENANT_CHARS
        or not tenant.isprintable()
    ):
        raise ValueError(
            f"{where}.tenant must be a non-blank string of 1..{MAX_TENANT_CHARS} printable "
            "characters (no control characters)"
        )
    roles = row.get("roles")
    if not isinstance(roles, list) or not roles:
        raise ValueError(f"{where}.roles is required: a list of one or more of {', '.join(ROLES)}")
    unknown = [r for r in roles if not isinstance(r, str) or r not in ROLES]
    if unknown:
        raise ValueError(
            f"{where}.roles has unknown roles {unknown!r}: expected {', '.join(ROLES)}"
        )
    principal = row.get("principal", sha.lower()[:12])
    if (
        not isinstance(principal, str)
        or not 0 < len(principal) <= 128
        or not principal.isprintable()
    ):
        raise ValueError(f"{where}.principal must be 1..128 printable characters")
    return sha.lower(), Identity(tenant, frozenset(roles), principal)


class IssuedKeys(Protocol):
    """API keys a service issues itself (stored hashed in its database), beside the file."""

    def cached(self, sha: str) -> Identity | None:
        """The identity of a live key by its digest from the process's cache (constant time)."""

    async def fetch(self, sha: str) -> Identity | None:
        """A digest the cache does not hold, looked up in the database (a key just minted
        elsewhere); None when no live key has it. May raise a DomainError (e.g. the database
        is unavailable), which the caller gets instead of UNAUTHENTICATED."""


class UnknownToken(DomainError):
    """A well-formed bearer credential that no table holds; `sha` is its digest (never the
    token), for the issued keys' database lookup."""

    def __init__(self, sha: str) -> None:
        super().__init__(ErrorKind.UNAUTHENTICATED, "UNAUTHENTICATED", "unknown token")
        self.sha = sha


class TokenTable:
    """Token digest → identity. In development mode (no table) every caller is the dev tenant.
    With issued keys, a digest the file does not hold is looked up in their cache."""

    def __init__(
        self, identities: Mapping[str, Identity] | None, issued: IssuedKeys | None = None
    ) -> None:
        self._identities = identities
        self._issued = issued

    def with_issued(self, issued: IssuedKeys) -> TokenTable:
        """The same table that also accepts the live keys of `issued` (not in development mode,
        where every caller is the dev tenant anyway)."""
        return self if self._identities is None else TokenTable(self._identities, issued)

    async def fetch_issued(self, unknown: UnknownToken) -> Identity:
        """After authenticate() refused a digest: the issued key that has it, or the refusal."""
        identity = None if self._issued is None else await self._issued.fetch(unknown.sha)
        if identity is None:
            raise unknown
        return identity

    @property
    def dev_mode(self) -> bool:
        return self._identities is None

    @classmethod
    def load(cls, path: Path | None) -> TokenTable:
        """Reads `{"tokens": [{"sha256": hex, "tenant": str, "roles": [..], "principal": str}]}`,
        strictly: a row without roles, with an unknown role, a malformed digest, a blank,
        non-string, over-long or non-printable tenant or a bad principal, and a digest listed
        twice, are refused with the row's index. `principal` is optional and defaults to the
        digest's first 12 hex digits."""
        if path is None:
            return cls(None)
        try:
            document = json.loads(path.read_text())
            rows = document.get("tokens") if isinstance(document, dict) else None
            if not isinstance(rows, list):
                raise ValueError('"tokens" must be a list of rows')
            identities: dict[str, Identity] = {}
            first_row: dict[str, int] = {}
            for index, row in enumerate(rows):
                sha, identity = _identity_of(row, index)
                if sha in first_row:
                    raise ValueError(
                        f"tokens[{index}].sha256 repeats tokens[{first_row[sha]}].sha256"
                    )
                first_row[sha] = index
                identities[sha] = identity
        except (OSError, ValueError) as exc:
            raise SettingsError(
                f"RATION_TOKEN_FILE={path} is invalid ({exc}): expected "
                '{"tokens": [{"sha256": "<hex>", "tenant": "...", "roles": ["reader"]}]}'
            ) from None
        return cls(identities)

    def authenticate(self, authorization: str | None) -> Identity:
        if self._identities is None:
            return DEV_IDENTITY
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        # RFC 7235: the scheme is case-insensitive ("bearer", "BEARER").
        if scheme.lower() != "bearer" or not credentials.strip():
            raise DomainError(
                ErrorKind.UNAUTHENTICATED, "UNAUTHENTICATED", "a bearer token is required"
            )
        sha = digest(credentials.strip())
        identity = self._identities.get(sha)
        if identity is None and self._issued is not None:
            identity = self._issued.cached(sha)
        if identity is None:
            raise UnknownToken(sha)
        return identity
