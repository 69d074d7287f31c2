-- budget.shard_fence_v1: On Citus, holds the tenant's shard still for this transaction: a shard
-- move or tenant isolation (deploy/README.md: shard_transfer_mode => 'block_writes') waits for
-- it to end, and it waits for a move in progress to end first. A no-op on plain PostgreSQL.
--
-- Why (issue 28): a move in 'block_writes' mode takes Citus's shard metadata lock in
-- ExclusiveLock mode on every node and copies the shard meanwhile; a write takes the same lock
-- in ShareLock mode, but only when the write statement starts. An engine transaction that
-- read its rows (runs FOR UPDATE, holds, pools) before the move took the lock, and wrote after
-- the move ended, mixed rows of the old shard with the new one: on a live cluster a hold
-- outlived its run's held amount, and the run's event sequence went back. Taking the lock in
-- ShareLock mode first, before any read, orders every engine transaction of the tenant wholly
-- before or wholly after a move.
--
-- After the wait, the tenant's shard may be another one (a split gave the tenant a shard of
-- its own, which is then locked too) or placed on another node (a move). A delegated call runs
-- on the worker that held the shard when the coordinator sent it; when the shard is no longer
-- there, its statements would find nothing, so the transaction fails with serialization_failure
-- and nothing done: the service runs the statement again (servicekit/db.py retries it), and
-- the coordinator sends it to the shard's new node. On the coordinator (group 0) statements
-- are routed by the current placement, so nothing needs checking there.
--
-- SECURITY DEFINER: Citus's lock_shard_metadata is for the tables' owner only. The shard comes
-- from budget.runs; every tenant table is co-located with it, and a move locks the whole
-- co-location group. Its argument is not named p_tenant: it runs where its caller runs.
CREATE OR REPLACE FUNCTION budget.shard_fence_v1(fenced_tenant text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    shard bigint;
    locked bigint;
    here integer;
BEGIN
    IF to_regproc('pg_catalog.lock_shard_metadata') IS NULL THEN
        RETURN;  -- plain PostgreSQL (a statement naming a Citus catalog would not plan here)
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'budget.runs'::regclass) THEN
        RETURN;  -- Citus, with the tables not distributed (yet)
    END IF;
    shard := get_shard_id_for_distribution_column('budget.runs', fenced_tenant);
    WHILE shard IS DISTINCT FROM locked LOOP  -- a split moved the tenant: lock its new shard
        PERFORM lock_shard_metadata(5, ARRAY[shard]);  -- 5: ShareLock
        locked := shard;
        shard := get_shard_id_for_distribution_column('budget.runs', fenced_tenant);
    END LOOP;
    SELECT groupid INTO here FROM pg_dist_local_group;
    IF here <> 0 AND NOT EXISTS (
        SELECT 1 FROM pg_dist_placement p WHERE p.shardid = shard AND p.groupid = here)
    THEN
        RAISE EXCEPTION 'the tenant''s shard moved to another node; run the statement again'
            USING ERRCODE = 'serialization_failure';
    END IF;
END;
$$;
-- Not PUBLIC's: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.shard_fence_v1(text) FROM PUBLIC;
