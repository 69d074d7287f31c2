-- Row-level security on every budget table: CTI-1's second line (DESIGN 5).
--
-- The services connect as an application role that is neither a superuser, nor BYPASSRLS,
-- nor the tables' owner (the role that runs this migration), and every transaction enters the
-- caller's tenant in the transaction-local setting ration.tenant_id (servicekit/tenancy.py:
-- SET LOCAL with BEGIN; the decision functions below set it from their tenant argument). A
-- query that forgot its tenant filter then still sees, and may write, one tenant's rows only.
-- An unset ration.tenant_id reads as NULL, which matches no row: fail closed. FORCE makes the
-- policies apply to the owner as well, so even a service run as the owner stays filtered.
--
-- Cross-tenant upkeep (the sweeper: overdue holds, request-log retention, stale watcher rows,
-- gauges) goes through the SECURITY DEFINER functions at the end, which run as the owner with
-- the transaction-local setting ration.upkeep = 'on'. The `upkeep` policies admit only that:
-- they are granted TO the owner (CURRENT_USER here), so the application role gains nothing by
-- setting ration.upkeep itself, and each function does one fixed thing and returns ids,
-- counts or balances, never a tenant's request or reply.

ALTER TABLE budget.runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.runs FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.scope_budgets ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.scope_budgets FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.pool_balances ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.pool_balances FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.holds FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.ledger FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.events FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.request_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.request_log FORCE ROW LEVEL SECURITY;
ALTER TABLE budget.watchers ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget.watchers FORCE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON budget.runs
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.scope_budgets
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.pool_balances
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.holds
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.ledger
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.events
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.request_log
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));
CREATE POLICY tenant_isolation ON budget.watchers
    USING (tenant_id = current_setting('ration.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('ration.tenant_id', true));

-- What upkeep may touch across tenants, and only as the owner inside the functions below.
CREATE POLICY upkeep_read ON budget.holds FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_read ON budget.scope_budgets FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_read ON budget.pool_balances FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_read ON budget.request_log FOR SELECT TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_purge ON budget.request_log FOR DELETE TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on');
CREATE POLICY upkeep_watchers ON budget.watchers FOR ALL TO CURRENT_USER
    USING (current_setting('ration.upkeep', true) = 'on')
    WITH CHECK (current_setting('ration.upkeep', true) = 'on');

-- The one-round-trip Reserve, Consume and Release (migration 0003) entered by tenant: each
-- sets ration.tenant_id from its tenant argument, then calls the decision function in the same
-- statement, so the hot path keeps one round trip and, distributed with the tenant argument,
-- sets the tenant on the node that runs it.
CREATE FUNCTION budget.reserve_as_tenant(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text, p_model text, p_estimate bigint[], p_up_to boolean,
    p_ttl_seconds integer, p_host_advisory boolean,
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    SELECT d.outcome, d.response, d.tally INTO outcome, response, tally
    FROM budget.reserve(p_tenant, p_request_id, p_fingerprint, p_run_id, p_reservation_id,
                        p_model, p_estimate, p_up_to, p_ttl_seconds, p_host_advisory) d;
END;
$$;

CREATE FUNCTION budget.consume_as_tenant(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text, p_model text, p_usage bigint[],
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    SELECT d.outcome, d.response, d.tally INTO outcome, response, tally
    FROM budget.consume(p_tenant, p_request_id, p_fingerprint, p_run_id, p_reservation_id,
                        p_model, p_usage) d;
END;
$$;

CREATE FUNCTION budget.release_as_tenant(
    p_tenant text, p_request_id text, p_fingerprint bytea, p_run_id text,
    p_reservation_id text,
    OUT outcome text, OUT response bytea, OUT tally jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('ration.tenant_id', p_tenant, true);
    SELECT d.outcome, d.response, d.tally INTO outcome, response, tally
    FROM budget.release(p_tenant, p_request_id, p_fingerprint, p_run_id, p_reservation_id) d;
END;
$$;

-- Upkeep. SECURITY DEFINER with a fixed search_path; EXECUTE is revoked from PUBLIC below and
-- reaches the application role through the operator's default privileges (README).

-- Runs with a hold past its expiry, oldest first; the sweeper expires each in its own
-- transaction as that run's tenant.
CREATE FUNCTION budget.overdue_runs(p_limit integer)
RETURNS TABLE (tenant_id text, run_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        SELECT DISTINCT h.tenant_id, h.run_id FROM budget.holds h
        WHERE h.state = 'open' AND h.expires_at <= now() LIMIT p_limit;
END;
$$;

CREATE FUNCTION budget.open_hold_count() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN (SELECT count(*) FROM budget.holds h WHERE h.state = 'open' AND h.expires_at > now());
END;
$$;

-- Stored replies past retention (servicekit/idempotency.py): walks the distinct tenants through
-- the primary key (a loose index scan), then deletes each tenant's old rows by its
-- (tenant_id, created_at) index. Returns how many it deleted.
CREATE FUNCTION budget.purge_request_log(p_hours integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deleted bigint;
BEGIN
    SET LOCAL ration.upkeep = 'on';
    WITH RECURSIVE tenants AS (
        (SELECT l.tenant_id FROM budget.request_log l ORDER BY l.tenant_id LIMIT 1)
        UNION ALL
        SELECT (SELECT r.tenant_id FROM budget.request_log r WHERE r.tenant_id > t.tenant_id
                ORDER BY r.tenant_id LIMIT 1)
        FROM tenants t WHERE t.tenant_id IS NOT NULL
    )
    DELETE FROM budget.request_log r USING tenants t
    WHERE r.tenant_id = t.tenant_id
      AND r.created_at < now() - make_interval(hours => greatest(p_hours, 24));
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;

-- Watcher rows belong to the process (hub) that wrote them, whatever their tenants.
CREATE FUNCTION budget.refresh_watchers(p_tenants text[], p_runs text[], p_hub text)
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

CREATE FUNCTION budget.forget_watchers(p_tenants text[], p_runs text[], p_hub text)
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

-- Rows of processes that stopped refreshing them (killed, or cut off from the database).
CREATE FUNCTION budget.purge_watchers(p_stale_seconds double precision) RETURNS bigint
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

-- Every tenant's pooled budgets with the newest balance row and what overdue holds still hold
-- on it, one JSON document per pool (budget_service/store_reads.py reads the same columns as
-- for a run's pools), for the remaining-budget gauges.
CREATE FUNCTION budget.pool_gauges() RETURNS SETOF json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        SELECT row_to_json(v) FROM (
            SELECT s.*, now() AS db_now, b.window_start AS balance_window,
                b.consumed_tokens AS balance_consumed_tokens,
                b.consumed_cost_nanos AS balance_consumed_cost_nanos,
                b.consumed_tool_calls AS balance_consumed_tool_calls,
                b.consumed_retries AS balance_consumed_retries,
                b.held_tokens AS balance_held_tokens,
                b.held_cost_nanos AS balance_held_cost_nanos,
                b.held_tool_calls AS balance_held_tool_calls,
                b.held_retries AS balance_held_retries,
                o.overdue_tokens, o.overdue_cost_nanos, o.overdue_tool_calls, o.overdue_retries
            FROM budget.scope_budgets s
            LEFT JOIN LATERAL (
                SELECT * FROM budget.pool_balances p
                WHERE p.tenant_id = s.tenant_id AND p.scope = s.scope
                  AND p.scope_id = s.scope_id
                ORDER BY p.window_start DESC LIMIT 1) b ON true
            LEFT JOIN LATERAL (
                SELECT coalesce(sum(h.granted_tokens), 0)::bigint AS overdue_tokens,
                       coalesce(sum(h.granted_cost_nanos), 0)::bigint AS overdue_cost_nanos,
                       coalesce(sum(h.granted_tool_calls), 0)::bigint AS overdue_tool_calls,
                       coalesce(sum(h.granted_retries), 0)::bigint AS overdue_retries
                FROM budget.holds h,
                     unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows)
                         AS k(scope, scope_id, window_start)
                WHERE h.tenant_id = s.tenant_id AND h.state = 'open' AND h.expires_at <= now()
                  AND k.scope = s.scope AND k.scope_id = s.scope_id
                  AND k.window_start = b.window_start) o ON true
            WHERE s.kind = 'pooled') v;
END;
$$;

REVOKE EXECUTE ON FUNCTION budget.overdue_runs(integer), budget.open_hold_count(),
    budget.purge_request_log(integer), budget.refresh_watchers(text[], text[], text),
    budget.forget_watchers(text[], text[], text), budget.purge_watchers(double precision),
    budget.pool_gauges()
FROM PUBLIC;
