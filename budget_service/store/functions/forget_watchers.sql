-- budget.forget_watchers: Which watcher rows a process gives up: it deletes its own.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
CREATE OR REPLACE FUNCTION budget.forget_watchers(p_tenants text[], p_runs text[], p_hub text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deleted bigint;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    DELETE FROM budget.watchers w
    WHERE (w.tenant_id, w.run_id) IN (SELECT * FROM unnest(p_tenants, p_runs))
      AND w.hub_id = p_hub;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.forget_watchers(text[],text[],text) FROM PUBLIC;
