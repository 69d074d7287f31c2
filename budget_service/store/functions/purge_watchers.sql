-- budget.purge_watchers: Which watcher rows are stale: those whose process stopped refreshing them.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
--
-- Rows of processes that stopped refreshing them (killed, or cut off from the database).
CREATE OR REPLACE FUNCTION budget.purge_watchers(p_stale_seconds double precision) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deleted bigint;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    DELETE FROM budget.watchers w WHERE w.seen_at < now() - make_interval(secs => p_stale_seconds);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.purge_watchers(double precision) FROM PUBLIC;
