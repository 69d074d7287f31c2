-- budget.overdue_runs: Which runs the sweeper visits: those with a hold past its expiry.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
--
-- Upkeep. SECURITY DEFINER with a fixed search_path; EXECUTE is revoked from PUBLIC below and
-- reaches the application role through the operator's default privileges (README).

-- Runs with a hold past its expiry, oldest first; the sweeper expires each in its own
-- transaction as that run's tenant.
CREATE OR REPLACE FUNCTION budget.overdue_runs(p_limit integer)
RETURNS TABLE (tenant_id text, run_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        SELECT DISTINCT h.tenant_id, h.run_id FROM budget.holds h
        WHERE h.state = 'open' AND h.expires_at <= now() LIMIT p_limit;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.overdue_runs(integer) FROM PUBLIC;
