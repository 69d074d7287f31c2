-- memory.shard_fence_v1: On Citus, holds the tenant's shard still for this write transaction, as
-- budget.shard_fence_v1 does for the budget engine (read its comment for why): a shard move or
-- tenant isolation in 'block_writes' mode waits for the transaction, and the transaction waits
-- for a move in progress, before it reads the memory's head. A no-op on plain PostgreSQL. The
-- shard comes from memory.memories (every tenant table is co-located with it). A write
-- transaction of the memory service runs on the coordinator (group 0), whose statements are
-- routed by the current placement.
CREATE OR REPLACE FUNCTION memory.shard_fence_v1(fenced_tenant text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    shard bigint;
    locked bigint;
    here integer;
BEGIN
    IF to_regproc('pg_catalog.lock_shard_metadata') IS NULL THEN
        RETURN;  -- plain PostgreSQL (a statement naming a Citus catalog would not plan here)
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'memory.memories'::regclass) THEN
        RETURN;  -- Citus, with the tables not distributed (yet)
    END IF;
    shard := get_shard_id_for_distribution_column('memory.memories', fenced_tenant);
    WHILE shard IS DISTINCT FROM locked LOOP  -- a split moved the tenant: lock its new shard
        PERFORM lock_shard_metadata(5, ARRAY[shard]);  -- 5: ShareLock
        locked := shard;
        shard := get_shard_id_for_distribution_column('memory.memories', fenced_tenant);
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
REVOKE EXECUTE ON FUNCTION memory.shard_fence_v1(text) FROM PUBLIC;
