-- budget.tenant_next_tx_v1: Where a tenant stream starting at the latest event starts.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0011).
--
-- Where a tenant stream that starts at the latest event starts (store/tenant_events.py): the
-- snapshot's xmax on the node that stamps the tenant's events. A function of the tenant, so
-- that on Citus it is delegated to that node (Citus delegates only a call standing alone,
-- `SELECT f(...)`: hence text, so the caller needs no cast around it).
CREATE OR REPLACE FUNCTION budget.tenant_next_tx_v1(p_tenant text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN pg_snapshot_xmax(pg_current_snapshot())::text;
END;
$$;
