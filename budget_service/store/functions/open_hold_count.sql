-- budget.open_hold_count: How many holds are open, every tenant together (a gauge).
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
CREATE OR REPLACE FUNCTION budget.open_hold_count() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN (SELECT count(*) FROM budget.holds h WHERE h.state = 'open' AND h.expires_at > now());
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.open_hold_count() FROM PUBLIC;
