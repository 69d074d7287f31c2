"""Who may call what: the role each BudgetService RPC needs, enforced by the auth interceptor."""

from __future__ import annotations

from ration.budget.v1 import budget_service_pb2
from servicekit.auth import RoleTable

# From the descriptor, so the service is in the pool that server reflection serves.
SERVICE_NAME = budget_service_pb2.DESCRIPTOR.services_by_name["BudgetService"].full_name

# Roles include the lower ones (admin > writer > reader); `approver` only approves ResumeRun,
# which is an approval rather than a self-service raise (admin holds it too). None: any
# authenticated caller. No budget RPC decides access from the request or stored data.
_ROLES: dict[str, str | None] = {
    "OpenRun": "writer",
    "GetRun": "reader",
    "CloseRun": "writer",
    "ResumeRun": "approver",
    "Reserve": "writer",
    "Consume": "writer",
    "Release": "writer",
    "Check": "reader",
    "ListRunEvents": "reader",
    "WatchRunEvents": "reader",
    "WatchTenantEvents": "reader",
    "PutScopeBudget": "admin",
    "GetScopeBudget": "admin",
    "DeleteScopeBudget": "admin",
    "ListScopeBudgets": "admin",
    "GetCapabilities": None,
    "ReportSpend": "reader",
    "CreateApiKey": "admin",
    "ListApiKeys": "admin",
    "RotateApiKey": "admin",
    "RevokeApiKey": "admin",
}
REQUIRED_ROLES: RoleTable = {f"/{SERVICE_NAME}/{name}": role for name, role in _ROLES.items()}
