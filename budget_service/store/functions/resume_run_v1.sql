-- budget.resume_run_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- ResumeRun, an approval of an INTERRUPTED run: its bounded limits rise additively by p_delta
-- (never past a host ceiling in p_ceilings, never down, never past the bigint range), it is
-- ACTIVE again with fresh once-only flags on the raised dimensions (the new limit is a new
-- budget to cross), its policy version moves on, and budget.reserved records the result.
-- p_delta, p_ceilings: tokens, cost nanos, tool calls, retries (NULL ceiling: none).
-- status: 'done'; 'refused' (state: the run is not INTERRUPTED); 'negative' (dimensions: the
-- negative amounts); 'overflow' (dimensions: the first limit past the bigint range); or
-- budget.lock_run_v1's 'missing' / 'applied'. A refusal changes nothing only because the
-- caller rolls back (the lock's expiries were written).
CREATE OR REPLACE FUNCTION budget.resume_run_v1(
    p_tenant text, p_run_id text, p_request_id text, p_delta bigint[], p_ceilings bigint[],
    p_approver text, p_note text,
    OUT status text, OUT state text, OUT dimensions text[], OUT expired integer)
LANGUAGE plpgsql AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries'];
    max_total constant numeric := 9223372036854775807;
    r record;
    d integer;
    v_new numeric;
    v_limits bigint[];
    v_binding jsonb;
    v_raised text[] := '{}';
    v_rose jsonb := '{}';
    v_requested jsonb := '{}';
    v_version integer;
    v_crossed text[];
    v_exhausted text[];
    v_breached text[];
    v_max_tokens bigint;
    v_max_cost_nanos bigint;
    v_max_tool_calls bigint;
    v_max_retries bigint;
BEGIN
    PERFORM budget.enter_tenant_v1(p_tenant);
    SELECT l.status, l.expired INTO status, expired
    FROM budget.lock_run_v1(p_tenant, p_run_id, p_request_id, false, false) AS l;
    IF status <> 'locked' THEN
        RETURN;
    END IF;
    SELECT u.* INTO r FROM budget.runs u WHERE u.tenant_id = p_tenant AND u.run_id = p_run_id;
    state := r.state;
    -- Refusals in the order the API reports them: the run's state, then the amounts.
    IF r.state <> 'interrupted' THEN
        status := 'refused';
        RETURN;
    END IF;
    dimensions := ARRAY(SELECT names[i] FROM generate_subscripts(names, 1) AS i
                        WHERE coalesce(p_delta[i], 0) < 0 ORDER BY i);
    IF cardinality(dimensions) > 0 THEN
        status := 'negative';
        RETURN;
    END IF;
    v_limits := ARRAY[r.max_tokens, r.max_cost_nanos, r.max_tool_calls, r.max_retries];
    v_binding := r.binding;
    FOR d IN 1..4 LOOP
        IF coalesce(p_delta[d], 0) > 0 THEN
            v_requested := v_requested || jsonb_build_object(names[d], p_delta[d]);
        END IF;
        -- An unbounded dimension stays unbounded; a zero delta changes nothing.
        CONTINUE WHEN v_limits[d] IS NULL OR coalesce(p_delta[d], 0) = 0;
        v_new := v_limits[d]::numeric + p_delta[d];
        IF p_ceilings[d] IS NOT NULL AND p_ceilings[d] < v_new THEN
            -- Clamped to the host ceiling, which now binds (a limit already above it stays).
            v_new := greatest(p_ceilings[d], v_limits[d]);
            v_binding := v_binding || jsonb_build_object(names[d], 'host');
        END IF;
        IF v_new > max_total THEN
            status := 'overflow';
            dimensions := ARRAY[names[d]];
            RETURN;
        END IF;
        IF v_new > v_limits[d] THEN
            v_raised := v_raised || names[d];
            v_rose := v_rose || jsonb_build_object(names[d], v_new - v_limits[d]);
            v_limits[d] := v_new;
        END IF;
    END LOOP;
    v_version := r.policy_version + 1;
    -- Computed before the UPDATE, and the limits passed as scalars: Citus 13.2 crashes the
    -- worker (signal 11) on an UPDATE of a distributed table, in a delegated function, whose
    -- SET list subscripts a variable (`max_tokens = v_limits[1]`).
    v_crossed := ARRAY(SELECT f FROM unnest(r.crossed) AS f WHERE NOT f = ANY(v_raised));
    v_exhausted := ARRAY(SELECT f FROM unnest(r.exhausted) AS f WHERE NOT f = ANY(v_raised));
    v_breached := ARRAY(SELECT f FROM unnest(r.breached) AS f WHERE NOT f = ANY(v_raised));
    v_max_tokens := v_limits[1];
    v_max_cost_nanos := v_limits[2];
    v_max_tool_calls := v_limits[3];
    v_max_retries := v_limits[4];
    UPDATE budget.runs SET
        state = 'active', max_tokens = v_max_tokens, max_cost_nanos = v_max_cost_nanos,
        max_tool_calls = v_max_tool_calls, max_retries = v_max_retries, binding = v_binding,
        policy_version = v_version,
        crossed = v_crossed, exhausted = v_exhausted, breached = v_breached,
        stopped_dimension = NULL, stopped_limit = NULL, stopped_consumed = NULL,
        stopped_observed = NULL, stopped_scope = NULL, stopped_scope_id = NULL,
        updated_at = now()
    WHERE tenant_id = p_tenant AND run_id = p_run_id;
    PERFORM budget.append_run_event_v1(p_tenant, p_run_id, 'budget.reserved',
                                       budget.reserved_payload_v1(v_limits, v_binding));
    -- What the limits actually rose by (after the ceilings), what was asked, and who approved:
    -- the authenticated principal, with the caller's note beside it.
    INSERT INTO budget.ledger (tenant_id, run_id, request_id, decision, policy_version, detail)
    VALUES (p_tenant, p_run_id, p_request_id, 'resume', v_version,
            jsonb_build_object('delta', v_rose, 'requested', v_requested,
                               'approver', p_approver)
            || CASE WHEN coalesce(p_note, '') = '' THEN '{}'::jsonb
                    ELSE jsonb_build_object('note', p_note) END);
    status := 'done';
END;
$$;
