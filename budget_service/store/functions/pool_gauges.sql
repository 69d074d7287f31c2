-- budget.pool_gauges: What every tenant's pools have left, for the remaining-budget gauges.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0005).
--
-- Every tenant's pooled budgets with the newest balance row and what overdue holds still hold
-- on it (model calls too), one JSON document per pool (budget_service/store/reads.py reads
-- the same columns as for a run's pools), for the remaining-budget gauges. The overdue
-- holds are found by index holds_pooled_by_expiry (its condition stated: migration 0020),
-- so each pool reads its tenant's overdue holds on pools, not every open hold.
CREATE OR REPLACE FUNCTION budget.pool_gauges() RETURNS SETOF json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SET LOCAL ration.upkeep = 'on';
    RETURN QUERY
        SELECT row_to_json(v) FROM (
            SELECT s.*, now() AS db_now, b.window_start AS balance_window,
                budget.window_start_v1(s.window_kind, now()) AS current_window,
                budget.window_end_v1(s.window_kind, budget.window_start_v1(s.window_kind, now()))
                    AS current_window_end,
                b.consumed_tokens AS balance_consumed_tokens,
                b.consumed_cost_nanos AS balance_consumed_cost_nanos,
                b.consumed_tool_calls AS balance_consumed_tool_calls,
                b.consumed_retries AS balance_consumed_retries,
                b.held_tokens AS balance_held_tokens,
                b.held_cost_nanos AS balance_held_cost_nanos,
                b.held_tool_calls AS balance_held_tool_calls,
                b.held_retries AS balance_held_retries,
                b.consumed_model_calls AS balance_consumed_model_calls,
                b.held_model_calls AS balance_held_model_calls,
                o.overdue_tokens, o.overdue_cost_nanos, o.overdue_tool_calls, o.overdue_retries,
                o.overdue_model_calls
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
                       coalesce(sum(h.granted_retries), 0)::bigint AS overdue_retries,
                       coalesce(sum(h.granted_model_calls), 0)::bigint AS overdue_model_calls
                FROM budget.holds h,
                     unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows)
                         AS k(scope, scope_id, window_start)
                WHERE h.tenant_id = s.tenant_id AND h.state = 'open'
                  AND cardinality(h.pool_scopes) > 0 AND h.expires_at <= now()
                  AND k.scope = s.scope AND k.scope_id = s.scope_id
                  AND k.window_start = b.window_start) o ON true
            WHERE s.kind = 'pooled') v;
END;
$$;
-- Upkeep only: EXECUTE reaches the application role by the operator's default privileges.
REVOKE EXECUTE ON FUNCTION budget.pool_gauges() FROM PUBLIC;
