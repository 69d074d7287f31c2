"""Canonical encodings a budget call is compared by: the fingerprint of an OpenRun."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from typing import Any

from budget_service.domain.commands import OpenRun


def _plain(value: Any) -> Any:
    """JSON values of domain data. A dataclass field at its default is left out, so adding a
    field with a default leaves every earlier encoding as it was."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        found = {}
        for f in fields(value):
            item = getattr(value, f.name)
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if default is MISSING or item != default:
                found[f.name] = _plain(item)
        return found
    if isinstance(value, Mapping):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: equal values always encode to the same bytes, whatever
    the order of their fields or map entries."""
    return json.dumps(
        _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def open_run_fingerprint(command: OpenRun) -> bytes:
    """What a second OpenRun of the same run_id must repeat to be the same call: the owners and
    the policy overlay (the run_id is the key itself)."""
    owners = {"project": command.project_id, "workflow": command.workflow_id}
    owners["agent"] = command.agent_id
    # Owners beyond the RFC's join only when set, so every earlier fingerprint is unchanged.
    if command.end_user_id:
        owners["endUser"] = command.end_user_id
    if command.api_key_id:
        owners["apiKey"] = command.api_key_id
    document: dict[str, Any] = {"owners": owners, "policy": command.policy}
    if command.tags:
        document["tags"] = dict(command.tags)
    return hashlib.sha256(b"open-run/v2\0" + canonical_json(document)).digest()


def legacy_open_run_fingerprint(command: OpenRun) -> bytes:
    """The first format (a repr of the dataclasses), still stored on runs opened before v2: it
    is compared, never written, so re-opening such a run still reads as the same call."""
    owners = (command.project_id, command.workflow_id, command.agent_id)
    return hashlib.sha256(repr((owners, command.policy)).encode()).digest()


def is_same_open(stored: bytes, command: OpenRun) -> bool:
    """Whether a run's stored fingerprint is this OpenRun's, in either format."""
    return stored in (open_run_fingerprint(command), legacy_open_run_fingerprint(command))
