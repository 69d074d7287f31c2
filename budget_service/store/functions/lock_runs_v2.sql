-- budget.lock_runs_v2: The batch's runs, locked in run_id order (COLLATE "C"), as the engine
-- holds them; read-only (Check): as they are, without locks.
--
-- The canonical lock order (run, then pools) is what keeps batches of several replicas, the
-- sweeper and the lifecycle calls from deadlocking (DESIGN 6). Each run is found by one
-- primary-key probe driven by the batch's own keys (unnest joined LATERAL: never a scan of
-- the tenant's runs filtered by the keys, whatever the statistics); the keys are sorted first
-- and each probe locks its row, so rows are locked in that order. `any_pools`: some run draws
-- on pooled budgets; `any_overdue`: some run has an open hold past its expiry. A run id
-- not found is simply absent (RUN_NOT_FOUND for its items); `found_ids` lists `runs` ids.
CREATE OR REPLACE FUNCTION budget.lock_runs_v2(
    tenant text, run_ids text[], read_only boolean, now timestamptz,
    OUT runs budget.engine_run_v2[], OUT found_ids text[], OUT any_pools boolean,
    OUT any_overdue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    IF NOT read_only THEN
        PERFORM FROM (SELECT w.run_id FROM unnest(run_ids) AS w(run_id)
                      ORDER BY w.run_id COLLATE "C") w
        CROSS JOIN LATERAL (
            SELECT FROM budget.runs u
            WHERE u.tenant_id = tenant AND u.run_id = w.run_id FOR UPDATE) s;
    END IF;
    SELECT array_agg(ROW(
               s.run_id, s.project_id, s.workflow_id, s.agent_id, s.state, s.threshold_percent,
               s.on_exhaustion, s.binding, s.model_lists, s.scope_advisory, s.policy_version,
               s.next_seq,
               ARRAY[s.max_tokens, s.max_cost_nanos, s.max_tool_calls, s.max_retries],
               ARRAY[s.consumed_tokens, s.consumed_cost_nanos, s.consumed_tool_calls,
                     s.consumed_retries],
               ARRAY[s.held_tokens, s.held_cost_nanos, s.held_tool_calls, s.held_retries],
               budget.flag_mask_v1(s.crossed), budget.flag_mask_v1(s.exhausted),
               budget.flag_mask_v1(s.breached), s.stopped_dimension, s.stopped_limit,
               s.stopped_consumed, s.stopped_observed, s.stopped_scope, s.stopped_scope_id,
               '{}'::integer[], NULL::text, 0, 0, 0, false, s.end_user_id,
               s.api_key_id)::budget.engine_run_v2
               ORDER BY s.run_id COLLATE "C"),
           array_agg(s.run_id ORDER BY s.run_id COLLATE "C"),
           coalesce(bool_or(cardinality(s.pool_scopes) > 0), false),
           coalesce(bool_or(EXISTS (
               SELECT FROM budget.holds o
               WHERE o.tenant_id = tenant AND o.run_id = s.run_id AND o.state = 'open'
                 AND o.expires_at <= now)), false)
    INTO runs, found_ids, any_pools, any_overdue
    FROM unnest(run_ids) AS w(run_id)
    CROSS JOIN LATERAL (
        SELECT * FROM budget.runs u
        WHERE u.tenant_id = tenant AND u.run_id = w.run_id LIMIT 1) s;
    runs := coalesce(runs, '{}');
    found_ids := coalesce(found_ids, '{}');
END;
$$;
