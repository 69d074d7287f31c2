"""Fresh unique ids (Cosmic Python's random_refs): how tests sharing one server and database
keep out of each other's way (run ids, memory refs, request ids, scope ids)."""

from __future__ import annotations

import uuid


def new_id(prefix: str = "req") -> str:
    """`prefix`-32 hex digits: valid as a run, scope or request id and as a memory_ref."""
    return f"{prefix}-{uuid.uuid4().hex}"
