-- End-user and API-key pools, run tags, issued API keys (issue 27; DESIGN 3.2, 3.10, 5).
--
-- A run may name the end-user it works for (the platform's customer) and carries the issued
-- key it was opened with, if any; both are pool scopes like project (pooled budgets only; the
-- engine reads pools generically by scope, scope_id and window). Tags are bounded key=value
-- pairs for reports, not a scope. Existing runs read as having neither ('' and '{}').

ALTER TABLE budget.runs
    ADD COLUMN end_user_id text NOT NULL DEFAULT '',
    ADD COLUMN api_key_id text NOT NULL DEFAULT '',
    ADD COLUMN tags jsonb NOT NULL DEFAULT '{}';

ALTER TABLE budget.scope_budgets DROP CONSTRAINT scope_budgets_scope_check;
ALTER TABLE budget.scope_budgets ADD CONSTRAINT scope_budgets_scope_check
    CHECK (scope IN ('workflow', 'agent', 'project', 'end_user', 'api_key'));
-- End-user and key budgets are pools only (a per-run cap there would bind a run's own limit
-- to a scope the run's reply cannot name).
ALTER TABLE budget.scope_budgets ADD CONSTRAINT scope_budgets_new_scopes_pooled
    CHECK (scope IN ('workflow', 'agent', 'project') OR kind = 'pooled');

-- Issued API keys (DESIGN 5, "Keys"): minted, rotated and revoked by admins through RPCs.
-- The key itself is never stored: only the SHA-256 of each of its secrets, as the token file.
CREATE TABLE budget.api_keys (
    tenant_id text NOT NULL,
    key_id text NOT NULL,
    roles text[] NOT NULL CHECK (cardinality(roles) > 0),
    principal text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, key_id)
);

-- A key's secrets: the current one (not_after NULL) and, after a rotation, the previous ones
-- until their overlap ends.
CREATE TABLE budget.api_key_secrets (
    tenant_id text NOT NULL,
    key_id text NOT NULL,
    secret_sha256 text NOT NULL CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    not_after timestamptz,
    PRIMARY KEY (tenant_id, key_id, secret_sha256)
);
-- Authentication looks a secret up by its digest before the tenant is known, through the
-- SECURITY DEFINER function api_key_identities_v1 only. No index on
-- the digest: tenant_id leads every index (one shard per tenant on Citus), the per-process
-- cache reads every live secret anyway, and a cache miss reads this small table.

ALTER TABLE budget.api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.api_keys FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.api_key_secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.api_key_secrets FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON budget.api_keys
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.api_key_secrets
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
-- The owner's lookup functions read across tenants, and only those.
CREATE POLICY upkeep_read ON budget.api_keys FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_read ON budget.api_key_secrets FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
