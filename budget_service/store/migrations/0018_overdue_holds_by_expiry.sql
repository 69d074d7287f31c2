-- The sweeper finds overdue holds by their expiry (issue 23: the cost of upkeep must not grow
-- with the holds tenants keep open). budget.overdue_runs looks across tenants for open holds
-- past their expiry; the only index it had, holds_open_by_expiry, leads with tenant_id, so every
-- sweep, on every replica, once a second, read every open hold of every tenant. This index
-- leads with expires_at and serves that cross-tenant upkeep search alone (it is the one budget
-- index not led by tenant_id, tests/integration/test_budget_schema.py); a tenant's own lookups
-- keep their tenant-led indexes, so one tenant's overdue holds never cost another's calls.
-- Building it locks writes to budget.holds while it runs (CHANGELOG, upgrading to 0.2.0).
CREATE INDEX holds_overdue_for_upkeep ON budget.holds (expires_at) WHERE state = 'open';
