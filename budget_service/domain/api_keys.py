"""Issued API keys: their records, input rules and how keys and ids are minted."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from budget_service.domain import input_rules as v
from servicekit.auth import ROLES
from servicekit.errors import DomainError, ErrorKind, FieldViolation

KEY_PREFIX = "rtn_"  # the shape of a key: the prefix, then 43 URL-safe base64 characters
MAX_OVERLAP_SECONDS = 30 * 24 * 3600
MAX_PRINCIPAL = 128


@dataclass(frozen=True)
class ApiKey:
    """An issued key as stored (never its secret)."""

    key_id: str
    roles: tuple[str, ...]
    principal: str
    created_at: datetime
    revoked_at: datetime | None
    has_budget: bool


@dataclass(frozen=True)
class NewKey:
    """A key to mint: its id and secret chosen before the transaction, so that a retried
    attempt writes the same ones."""

    key_id: str
    secret: str

    @classmethod
    def mint(cls) -> NewKey:
        return cls(f"key-{secrets.token_hex(10)}", KEY_PREFIX + secrets.token_urlsafe(32))


@dataclass(frozen=True)
class Minted:
    """What CreateApiKey and RotateApiKey return; `secret` is empty on a replay."""

    key: ApiKey
    secret: str
    previous_valid_until: datetime | None = None


def validate_roles(roles: Sequence[str], path: str = "roles") -> list[FieldViolation]:
    if not roles:
        return [FieldViolation(path, f"is required: one or more of {', '.join(ROLES)}")]
    if len(set(roles)) != len(roles):
        return [FieldViolation(path, "must not repeat a role")]
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        return [FieldViolation(path, f"must each be one of {', '.join(ROLES)}")]
    return []


def validate_principal(principal: str, path: str = "principal") -> list[FieldViolation]:
    if principal and (len(principal) > MAX_PRINCIPAL or not principal.isprintable()):
        return [FieldViolation(path, f"must be 1..{MAX_PRINCIPAL} printable characters")]
    return []


def validate_key_id(key_id: str, path: str = "key_id") -> list[FieldViolation]:
    return v.validate_id(key_id, path)


def validate_overlap(seconds: int, path: str = "overlap_seconds") -> list[FieldViolation]:
    return v.check_int(seconds, path, 0, MAX_OVERLAP_SECONDS)


def api_key_not_found() -> DomainError:
    return DomainError(ErrorKind.NOT_FOUND, "API_KEY_NOT_FOUND", "no such API key")
