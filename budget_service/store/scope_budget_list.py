"""Budget SQL of ListScopeBudgets: one tenant's scope budgets, filtered and keyset-paged."""

from __future__ import annotations

import asyncpg

from budget_service.domain.commands import ScopeBudgetQuery, ScopeBudgetSortKey
from budget_service.domain.records import StoredScopeBudget
from budget_service.store import rows

# Keyset paging on the primary key (tenant_id, scope, scope_id, kind): each page is an index
# range scan from the previous page's last key, however deep the page.
_LIST_SCOPE_BUDGETS = """
SELECT * FROM budget.scope_budgets
WHERE tenant_id = $1
  AND ($2::text IS NULL OR scope = $2)
  AND ($3::text IS NULL OR kind = $3)
  AND ($4::text IS NULL OR window_kind = $4)
  AND ($5::text IS NULL OR (scope, scope_id, kind) > ($5, $6, $7))
ORDER BY scope, scope_id, kind
LIMIT $8"""


async def list_scope_budgets(
    conn: asyncpg.Connection,
    tenant: str,
    query: ScopeBudgetQuery,
    after: ScopeBudgetSortKey | None,
    limit: int,
) -> list[StoredScopeBudget]:
    found = await conn.fetch(
        _LIST_SCOPE_BUDGETS,
        tenant,
        None if query.scope is None else query.scope.value,
        None if query.kind is None else query.kind.value,
        None if query.window is None else query.window.value,
        None if after is None else after.scope,
        None if after is None else after.scope_id,
        None if after is None else after.kind,
        limit,
    )
    return [
        StoredScopeBudget(rows.scope_budget_of(row), row["version"], row["updated_at"])
        for row in found
    ]
