"""Who may call what: the role each MemoryService RPC needs, enforced by the auth interceptor."""

from __future__ import annotations

from ration.memory.v1 import memory_service_pb2
from servicekit.auth import RoleTable

SERVICE_NAME = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name

# Roles include the lower ones (admin > writer > reader). None: any authenticated caller.
# CompactMemory is open to readers because a dry run only reads; a commit needs admin, which
# depends on the request (dry_run), so MemoryCompaction.compact checks it.
_ROLES: dict[str, str | None] = {
    "AppendEntries": "writer",
    "ReviseEntry": "writer",
    "ForgetEntries": "writer",
    "ReactivateEntries": "writer",
    "OrganizeMemory": "writer",
    "CompactMemory": "reader",
    "GetCapacity": "reader",
    "ListRevisions": "reader",
    "ListChanges": "reader",
    "GetChanges": "reader",  # deprecated: ListChanges
    "GetEntryVersion": "reader",
    "ValidateCitation": "reader",
    "ListMemory": "reader",
    "SearchMemory": "reader",
    "GetCapabilities": None,
}
REQUIRED_ROLES: RoleTable = {f"/{SERVICE_NAME}/{name}": role for name, role in _ROLES.items()}
