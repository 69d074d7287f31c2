-- budget.overdue_runs: Which runs the sweeper visits: those with a hold past its expiry.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
--
-- Upkeep. SECURITY DEFINER with a fixed search_path; EXECUTE is revoked from PUBLIC below and
-- reaches the application role through the operator's default privileges (README).

-- Runs with a hold past its expiry, the oldest overdue first; the sweeper expires each in
-- its own transaction as that run's tenant.
CREATE OR REPLACE FUNCTION budget.overdue_runs(p_limit integer)
RETURNS TABLE (tenant_id text, run_id text)
LANGUAGE plpgsql SECURITY DEFINER
-- No sequential scan, whatever the statistics: under row-level security the policies' OR is a
-- filter the planner cannot cost, and it then reads every open hold of every tenant, on every
-- replica, every sweep, when walking holds_upkeep_by_expiry reads only the overdue ones.
-- That index is partial on state = 'open' AND ended_at IS NULL (one condition twice, by the
-- table's CHECK), which only this search states, so a tenant's own lookups never walk it
-- (migration 0020).
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    -- The oldest overdue holds first: the walk stops after p_limit holds past their expiry.
    RETURN QUERY
        SELECT DISTINCT o.tenant_id, o.run_id FROM (
            SELECT h.tenant_id, h.run_id FROM budget.holds h
            WHERE h.state = 'open' AND h.ended_at IS NULL AND h.expires_at <= now()
            ORDER BY h.expires_at LIMIT p_limit) o;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.overdue_runs(integer) FROM PUBLIC;
