-- budget.lock_runs_v3: The batch's runs, locked in run_id order (COLLATE "C"), as the engine
-- holds them. `mode`: 'wait' locks each run, waiting for a lock held elsewhere; 'skip' locks
-- the runs it can at once (FOR UPDATE SKIP LOCKED) and lists the others, which exist but are
-- locked elsewhere, in `busy_ids` without loading them; 'read' (Check) reads them as they
-- are, without locks.
--
-- The canonical lock order (run, then pools) is what keeps batches of several replicas, the
-- sweeper and the lifecycle calls from deadlocking (DESIGN 6). Each run is found by one
-- primary-key probe driven by the batch's own keys (unnest joined LATERAL: never a scan of
-- the tenant's runs filtered by the keys, whatever the statistics); the keys are sorted first
-- and each probe locks its row, so rows are locked in that order. `any_pools`: some loaded run
-- draws on pooled budgets; `any_overdue`: some loaded run has an open hold past its expiry. A
-- run id not found is simply absent (RUN_NOT_FOUND for its items); `found_ids` lists `runs`
-- ids.
--
-- Why 'skip' (issue 24, "a run locked elsewhere delays only its own calls"): a tenant's batch
-- that waited for one run locked by a long transaction elsewhere would hold up every other run
-- of the tenant with it. Skipped runs are not waited on here; their items go to a lane of
-- their own run (budget_service/usecases/reservations.py), which calls the engine in 'wait'
-- mode. In 'skip' mode the read below loads only the runs this transaction locked, so nothing
-- it reads changes before the batch commits; a skipped run's row is not even read (it only
-- gets an existence probe, so that a missing run is still RUN_NOT_FOUND, not busy).
CREATE OR REPLACE FUNCTION budget.lock_runs_v3(
    tenant text, run_ids text[], mode text, now timestamptz,
    OUT runs budget.engine_run_v2[], OUT found_ids text[], OUT busy_ids text[],
    OUT any_pools boolean, OUT any_overdue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    locked text[];
BEGIN
    IF mode = 'wait' THEN
        PERFORM FROM (SELECT w.run_id FROM unnest(run_ids) AS w(run_id)
                      ORDER BY w.run_id COLLATE "C") w
        CROSS JOIN LATERAL (
            SELECT FROM budget.runs u
            WHERE u.tenant_id = tenant AND u.run_id = w.run_id FOR UPDATE) s;
    ELSIF mode = 'skip' THEN
        locked := ARRAY(
            SELECT s.run_id FROM (SELECT w.run_id FROM unnest(run_ids) AS w(run_id)
                                  ORDER BY w.run_id COLLATE "C") w
            CROSS JOIN LATERAL (
                SELECT u.run_id FROM budget.runs u
                WHERE u.tenant_id = tenant AND u.run_id = w.run_id FOR UPDATE SKIP LOCKED) s);
    ELSIF mode <> 'read' THEN
        RAISE EXCEPTION 'unknown lock mode %', mode;
    END IF;
    -- A run skipped above is busy if it exists; one that does not is simply not found. (Only
    -- the keys not locked are probed, each by primary key: LIMIT 1 keeps it a probe.)
    busy_ids := '{}';
    IF mode = 'skip' AND cardinality(locked) < cardinality(run_ids) THEN
        busy_ids := ARRAY(
            SELECT s.run_id FROM unnest(run_ids) AS w(run_id)
            CROSS JOIN LATERAL (
                SELECT u.run_id FROM budget.runs u
                WHERE u.tenant_id = tenant AND u.run_id = w.run_id LIMIT 1) s
            WHERE NOT w.run_id = ANY(locked));
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
    FROM unnest(CASE WHEN mode = 'skip' THEN locked ELSE run_ids END) AS w(run_id)
    CROSS JOIN LATERAL (
        SELECT * FROM budget.runs u
        WHERE u.tenant_id = tenant AND u.run_id = w.run_id LIMIT 1) s;
    runs := coalesce(runs, '{}');
    found_ids := coalesce(found_ids, '{}');
END;
$$;
