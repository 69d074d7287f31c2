-- Progress of `ration notify` (budget_service/usecases/notifier.py), one row per tenant and
-- webhook: the tenant event stream position (migration 0008) up to which every chosen event
-- was delivered (the receiver answered 2xx) or passed over, and the lease of the notify
-- process delivering them now. A process delivers only while it holds the lease (`holder`,
-- until `lease_until` by the database clock, renewed as it goes); every write of progress is
-- conditional on still holding it, so a process that lost its lease cannot move the position.
CREATE TABLE budget.notify_progress (
    tenant_id text NOT NULL,
    webhook_id text NOT NULL,
    after_tx xid8 NOT NULL,
    after_run_id text NOT NULL,
    after_seq bigint NOT NULL CHECK (after_seq >= 0),
    holder text,
    lease_until timestamptz NOT NULL,
    delivered bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, webhook_id)
);

-- Under row-level security like every tenant table (migration 0005): the notify process
-- enters each tenant it follows, as the services do.
ALTER TABLE budget.notify_progress ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.notify_progress FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON budget.notify_progress
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
