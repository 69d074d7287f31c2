-- budget.write_balances_v2: Each run and pool row the batch changed, written once with what
-- the batch left in it (the rows are locked since the batch began: nothing else changed them).
-- One UPDATE per row by primary key (a plan cached once, generic); event counters advance by
-- the events the batch appended.
--
-- The balances are copied into scalar variables before each UPDATE: Citus 13.2.2 crashes the
-- backend planning an UPDATE of a distributed table (signal 11; on the worker when the call is
-- delegated) whose SET list subscripts a parameter: `SET consumed_tokens = r.used[1]`, `= v[1]`
-- and a prepared `= $1[1]` all crash; subscripts in WHERE and in INSERTs do not.
CREATE OR REPLACE FUNCTION budget.write_balances_v2(
    tenant text, runs budget.engine_run_v2[], pools budget.engine_pool_v2[], now timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    r budget.engine_run_v2;
    p budget.engine_pool_v2;
    u1 bigint; u2 bigint; u3 bigint; u4 bigint; u5 bigint;
    h1 bigint; h2 bigint; h3 bigint; h4 bigint; h5 bigint;
BEGIN
    FOREACH r IN ARRAY runs LOOP
        CONTINUE WHEN NOT r.touched;
        u1 := r.used[1]; u2 := r.used[2]; u3 := r.used[3]; u4 := r.used[4];
        h1 := r.held[1]; h2 := r.held[2]; h3 := r.held[3]; h4 := r.held[4];
        UPDATE budget.runs SET
            state = r.state,
            consumed_tokens = u1, consumed_cost_nanos = u2,
            consumed_tool_calls = u3, consumed_retries = u4,
            held_tokens = h1, held_cost_nanos = h2, held_tool_calls = h3, held_retries = h4,
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
        u1 := p.used[1]; u2 := p.used[2]; u3 := p.used[3]; u4 := p.used[4]; u5 := p.used[5];
        h1 := p.held[1]; h2 := p.held[2]; h3 := p.held[3]; h4 := p.held[4]; h5 := p.held[5];
        UPDATE budget.pool_balances SET
            consumed_tokens = u1, consumed_cost_nanos = u2,
            consumed_tool_calls = u3, consumed_retries = u4, consumed_model_calls = u5,
            held_tokens = h1, held_cost_nanos = h2,
            held_tool_calls = h3, held_retries = h4, held_model_calls = h5,
            crossed = budget.flag_names_v1(p.crossed),
            exhausted = budget.flag_names_v1(p.exhausted),
            next_seq = next_seq + p.events
        WHERE tenant_id = tenant AND scope = p.scope AND scope_id = p.scope_id
          AND window_start = p.window_start;
    END LOOP;
END;
$$;
