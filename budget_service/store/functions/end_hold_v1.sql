-- budget.end_hold_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Ends one open hold of a locked run (a release, or an expiry): what it granted stops counting
-- on the run and on every pool row it draws on, and the ledger records the held amounts going
-- (negative), with the pools they left, under the run's current policy version. The caller has
-- locked the run and those pool rows (run first, pools in the canonical order).
CREATE OR REPLACE FUNCTION budget.end_hold_v1(
    p_tenant text, p_run_id text, p_reservation_id text, p_state text, p_decision text,
    p_request_id text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    v_version integer;
BEGIN
    -- Guarded by state = 'open': a hold ends exactly once.
    UPDATE budget.holds SET state = p_state, ended_at = now()
    WHERE tenant_id = p_tenant AND run_id = p_run_id AND reservation_id = p_reservation_id
      AND state = 'open'
    RETURNING model, granted_tokens AS g1, granted_cost_nanos AS g2, granted_tool_calls AS g3,
              granted_retries AS g4, granted_model_calls AS g5, pool_scopes, pool_scope_ids,
              pool_windows
    INTO h;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'hold % is not open', p_reservation_id
            USING ERRCODE = 'serialization_failure';
    END IF;
    -- Settling more than is held would mean a hold ended twice: the CHECK (held >= 0)
    -- constraints of runs and pool_balances refuse it (a bug, never a client error).
    UPDATE budget.runs SET
        held_tokens = held_tokens - h.g1, held_cost_nanos = held_cost_nanos - h.g2,
        held_tool_calls = held_tool_calls - h.g3, held_retries = held_retries - h.g4,
        updated_at = now()
    WHERE tenant_id = p_tenant AND run_id = p_run_id
    RETURNING policy_version INTO v_version;
    -- A pool row that no longer exists has nothing to give back.
    UPDATE budget.pool_balances p SET
        held_tokens = p.held_tokens - h.g1, held_cost_nanos = p.held_cost_nanos - h.g2,
        held_tool_calls = p.held_tool_calls - h.g3, held_retries = p.held_retries - h.g4,
        held_model_calls = p.held_model_calls - h.g5
    FROM unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows) AS k(scope, scope_id, w)
    WHERE p.tenant_id = p_tenant AND p.scope = k.scope AND p.scope_id = k.scope_id
      AND p.window_start = k.w;
    INSERT INTO budget.ledger (
        tenant_id, run_id, request_id, decision, reservation_id, model, policy_version,
        held_tokens, held_cost_nanos, held_tool_calls, held_retries, held_model_calls, pools)
    SELECT p_tenant, p_run_id, p_request_id, p_decision, p_reservation_id, h.model, v_version,
           -h.g1, -h.g2, -h.g3, -h.g4, -h.g5,
           coalesce(jsonb_agg(jsonb_build_object(
               'scope', k.scope, 'scope_id', k.scope_id,
               'window_start', budget.iso_utc_v1(k.w)) ORDER BY k.o), '[]')
    FROM unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows)
         WITH ORDINALITY AS k(scope, scope_id, w, o);
END;
$$;
