-- budget.write_balances_v2: Each run and pool row the batch changed, written once with what
-- the batch left in it (the rows are locked since the batch began: nothing else changed them).
-- One UPDATE per row by primary key (a plan cached once, generic); event counters advance by
-- the events the batch appended.
CREATE OR REPLACE FUNCTION budget.write_balances_v2(
    tenant text, runs budget.engine_run_v2[], pools budget.engine_pool_v2[], now timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    r budget.engine_run_v2;
    p budget.engine_pool_v2;
BEGIN
    FOREACH r IN ARRAY runs LOOP
        CONTINUE WHEN NOT r.touched;
        UPDATE budget.runs SET
            state = r.state,
            consumed_tokens = r.used[1], consumed_cost_nanos = r.used[2],
            consumed_tool_calls = r.used[3], consumed_retries = r.used[4],
            held_tokens = r.held[1], held_cost_nanos = r.held[2],
            held_tool_calls = r.held[3], held_retries = r.held[4],
            crossed = budget.flag_names_v1(r.crossed),
            exhausted = budget.flag_names_v1(r.exhausted),
            breached = budget.flag_names_v1(r.breached),
            stopped_dimension = r.stop_dim, stopped_limit = r.stop_lim,
            stopped_consumed = r.stop_used, stopped_observed = r.stop_obs,
            stopped_scope = r.stop_scope, stopped_scope_id = r.stop_scope_id,
            next_seq = next_seq + r.events,
            advisory_refusals = advisory_refusals + r.advisory_refusals,
            updated_at = now
        WHERE tenant_id = tenant AND run_id = r.run_id;
    END LOOP;
    FOREACH p IN ARRAY pools LOOP
        CONTINUE WHEN NOT (p.touched AND p.found);
        UPDATE budget.pool_balances SET
            consumed_tokens = p.used[1], consumed_cost_nanos = p.used[2],
            consumed_tool_calls = p.used[3], consumed_retries = p.used[4],
            consumed_model_calls = p.used[5],
            held_tokens = p.held[1], held_cost_nanos = p.held[2],
            held_tool_calls = p.held[3], held_retries = p.held[4],
            held_model_calls = p.held[5],
            crossed = budget.flag_names_v1(p.crossed),
            exhausted = budget.flag_names_v1(p.exhausted),
            next_seq = next_seq + p.events
        WHERE tenant_id = tenant AND scope = p.scope AND scope_id = p.scope_id
          AND window_start = p.window_start;
    END LOOP;
END;
$$;
