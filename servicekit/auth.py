"""Bearer-token authentication: tokens (stored as SHA-256 digests) map to a tenant and roles."""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servicekit.errors import DomainError, ErrorKind
from servicekit.settings import SettingsError

ROLES = ("reader", "writer", "admin", "approver")
# Each role includes the ones before it: a writer may read, an admin may write. `approver`
# (ResumeRun approvals) includes no other role; admin includes it too.
_RANK = {role: index for index, role in enumerate(ROLES[:3])}
DEV_TENANT = "dev"


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

    def require(self, role: str) -> None:
        if not any(_grants(r, role) for r in self.roles):
            raise DomainError(
                ErrorKind.FORBIDDEN,
                "ROLE_REQUIRED",
                f"this call needs the {role} role",
                metadata={"role": role},
            )


DEV_IDENTITY = Identity(DEV_TENANT, frozenset(ROLES), DEV_TENANT)
identity_var: contextvars.ContextVar[Identity] = contextvars.ContextVar("identity")


def current_identity() -> Identity:
    """The authenticated caller of the RPC being served (set by the auth interceptor)."""
    return identity_var.get()


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenTable:
    """Token digest → identity. In development mode (no table) every caller is the dev tenant."""

    def __init__(self, identities: Mapping[str, Identity] | None) -> None:
        self._identities = identities

    @property
    def dev_mode(self) -> bool:
        return self._identities is None

    @classmethod
    def load(cls, path: Path | None) -> TokenTable:
        """Reads `{"tokens": [{"sha256": hex, "tenant": str, "roles": [..], "principal": str}]}`;
        `principal` is optional and defaults to the digest's first 12 hex digits."""
        if path is None:
            return cls(None)
        try:
            document = json.loads(path.read_text())
            identities = {}
            for index, row in enumerate(document["tokens"]):
                sha = str(row["sha256"]).lower()
                roles = frozenset(row.get("roles", ["reader", "writer"]))
                if len(sha) != 64 or not roles or not roles <= set(ROLES) or not row["tenant"]:
                    raise ValueError(f"tokens[{index}]")
                principal = row.get("principal", sha[:12])
                if (
                    not isinstance(principal, str)
                    or not 0 < len(principal) <= 128
                    or not principal.isprintable()
                ):
                    raise ValueError(f"tokens[{index}].principal")
                identities[sha] = Identity(str(row["tenant"]), roles, principal)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SettingsError(
                f"RATION_TOKEN_FILE={path} is invalid ({exc}): expected "
                '{"tokens": [{"sha256": "<hex>", "tenant": "...", "roles": ["reader"]}]}'
            ) from None
        return cls(identities)

    def authenticate(self, authorization: str | None) -> Identity:
        if self._identities is None:
            return DEV_IDENTITY
        if not authorization or not authorization.startswith("Bearer "):
            raise DomainError(
                ErrorKind.UNAUTHENTICATED, "UNAUTHENTICATED", "a bearer token is required"
            )
        identity = self._identities.get(digest(authorization[len("Bearer ") :].strip()))
        if identity is None:
            raise DomainError(ErrorKind.UNAUTHENTICATED, "UNAUTHENTICATED", "unknown token")
        return identity
