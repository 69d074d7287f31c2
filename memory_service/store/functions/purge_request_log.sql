-- memory.purge_request_log: Which stored replies are past retention: it deletes them.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
CREATE OR REPLACE FUNCTION memory.purge_request_log(p_hours integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deleted bigint;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    DELETE FROM memory.request_log r
    WHERE r.created_at < now() - make_interval(hours => greatest(p_hours, 24));
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION memory.purge_request_log(integer) FROM PUBLIC;
