-- Spend reports (ReportSpend, store/reports.py) sum a tenant's `consume` ledger rows of a time
-- window. Without this index that is a scan of the tenant's whole ledger; with it, of the
-- window's consume rows only. Partial, so grants, releases and expiries (most rows) pay
-- nothing for it, and a Consume pays one more index entry. Built in the migration's
-- transaction: on a large existing ledger expect the migration to hold a write lock on
-- budget.ledger while it builds.
CREATE INDEX ledger_consumes_by_time ON budget.ledger (tenant_id, created_at)
    WHERE decision = 'consume';
