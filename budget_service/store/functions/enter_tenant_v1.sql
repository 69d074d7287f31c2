-- budget.enter_tenant_v1: The first step of every engine entry point (decide_batch_v3,
-- open_run_v2, close_run_v1, resume_run_v1, expire_run_v1): on Citus, holds the tenant's shard
-- still (budget.shard_fence_v1; on plain PostgreSQL, where Citus's lock function does not
-- exist, nothing is called), then enters the tenant for row-level security (migration 0005)
-- for the rest of the transaction.
CREATE OR REPLACE FUNCTION budget.enter_tenant_v1(entered_tenant text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regproc('pg_catalog.lock_shard_metadata') IS NOT NULL THEN
        PERFORM budget.shard_fence_v1(entered_tenant);
    END IF;
    PERFORM set_config('ration.tenant_id', entered_tenant, true);
END;
$$;
