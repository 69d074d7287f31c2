-- budget.open_run_v2: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer;
-- v2, migration 0016: the run's end-user, issued key and tags, issue 27).
--
-- OpenRun's writes: the run row with its resolved effective budget, the 'open' ledger row
-- (detail: the pooled budgets it draws on) and budget.reserved as event 1. Returns false, and
-- writes nothing, when the run id exists (the caller compares the stored fingerprint).
-- p_limits: max tokens, cost nanos, tool calls, retries (NULL: unbounded).
CREATE OR REPLACE FUNCTION budget.open_run_v2(
    p_tenant text, p_run_id text, p_project_id text, p_workflow_id text, p_agent_id text,
    p_fingerprint bytea, p_limits bigint[], p_threshold integer, p_on_exhaustion text,
    p_binding jsonb, p_model_lists jsonb, p_pool_scopes text[], p_pool_scope_ids text[],
    p_scope_advisory boolean, p_request_id text, p_end_user_id text, p_api_key_id text,
    p_tags jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM budget.enter_tenant_v1(p_tenant);
    INSERT INTO budget.runs (
        tenant_id, run_id, project_id, workflow_id, agent_id, open_fingerprint, state,
        max_tokens, max_cost_nanos, max_tool_calls, max_retries, threshold_percent,
        on_exhaustion, binding, model_lists, pool_scopes, pool_scope_ids, scope_advisory,
        end_user_id, api_key_id, tags)
    VALUES (p_tenant, p_run_id, p_project_id, p_workflow_id, p_agent_id, p_fingerprint,
            'active', p_limits[1], p_limits[2], p_limits[3], p_limits[4], p_threshold,
            p_on_exhaustion, p_binding, p_model_lists, p_pool_scopes, p_pool_scope_ids,
            p_scope_advisory, p_end_user_id, p_api_key_id, p_tags)
    ON CONFLICT (tenant_id, run_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO budget.ledger (tenant_id, run_id, request_id, decision, policy_version, detail)
    SELECT p_tenant, p_run_id, p_request_id, 'open', 1,
           jsonb_build_object('pools', coalesce(
               jsonb_agg(k.scope || ':' || k.scope_id ORDER BY k.o), '[]'))
    FROM unnest(p_pool_scopes, p_pool_scope_ids) WITH ORDINALITY AS k(scope, scope_id, o);
    PERFORM budget.append_run_event_v1(p_tenant, p_run_id, 'budget.reserved',
                                       budget.reserved_payload_v1(p_limits, p_binding));
    RETURN true;
END;
$$;
