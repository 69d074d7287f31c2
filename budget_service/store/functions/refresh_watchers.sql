-- budget.refresh_watchers: Which watcher rows a process still owns: it refreshes them.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
--
-- Watcher rows belong to the process (hub) that wrote them, whatever their tenants.
CREATE OR REPLACE FUNCTION budget.refresh_watchers(p_tenants text[], p_runs text[], p_hub text)
RETURNS TABLE (tenant_id text, run_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        WITH refreshed AS (
            UPDATE budget.watchers w SET seen_at = now()
            WHERE (w.tenant_id, w.run_id) IN (SELECT * FROM unnest(p_tenants, p_runs))
              AND w.hub_id = p_hub
            RETURNING w.tenant_id, w.run_id)
        SELECT f.tenant_id, f.run_id FROM refreshed f;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.refresh_watchers(text[],text[],text) FROM PUBLIC;
