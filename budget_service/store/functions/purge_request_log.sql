-- budget.purge_request_log: Which stored replies are past retention: it deletes them.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0011).
--
-- Request-log retention without a recursive CTE (Citus plans one only with a filter on the
-- distribution column): one tenant at a time, each step a lookup of the next tenant id by the
-- primary key and a delete of that tenant's old rows by its (tenant_id, created_at) index, so
-- on Citus every delete is a single-shard statement.
CREATE OR REPLACE FUNCTION budget.purge_request_log(p_hours integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cutoff constant timestamptz := now() - make_interval(hours => greatest(p_hours, 24));
    tenant text;
    n bigint;
    deleted bigint := 0;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    tenant := (SELECT min(l.tenant_id) FROM budget.request_log l);
    WHILE tenant IS NOT NULL LOOP
        DELETE FROM budget.request_log r WHERE r.tenant_id = tenant AND r.created_at < cutoff;
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        tenant := (SELECT min(l.tenant_id) FROM budget.request_log l WHERE l.tenant_id > tenant);
    END LOOP;
    RETURN deleted;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.purge_request_log(integer) FROM PUBLIC;
