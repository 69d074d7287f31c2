-- budget.reserve_refusal_v2: Whether a hard-mode Reserve is refused, from the verdict, and
-- what a breach of the run's own budget does to the run.
--
-- In advisory mode nothing is refused here (the would-be refusal is reported on the grant).
-- A pool that cannot fit refuses BUDGET_EXHAUSTED naming the pool, with RetryInfo to its
-- window's end; the run lives (its own budget is not breached). A breach of the run's own
-- budget emits budget.exhausted (once) and cap.breached, then fails or interrupts the run
-- (budget.run_stop_v2) and refuses with the state it left (DESIGN 3.4). Contention refuses
-- BUDGET_HELD, retryable, the run untouched. `facts` is NULL when the Reserve is granted.
-- The oracle's twins: tests/support/oracle.py `apply_reserve_breach`, `held_refusal`.
CREATE OR REPLACE FUNCTION budget.reserve_refusal_v2(
    INOUT run budget.engine_run_v2, pools budget.engine_pool_v2[], v budget.engine_verdict_v2,
    advisory boolean, now timestamptz, OUT facts jsonb, OUT events budget.engine_event_v2[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
    kinds constant text[] :=
        ARRAY['budget-tokens', 'budget-cost', 'budget-tool-calls', 'budget-retries'];
    d constant integer := v.breach_dim;
    stop record;
    pool budget.engine_pool_v2;
BEGIN
    events := '{}';
    IF d IS NOT NULL AND advisory THEN
        RETURN;  -- events only, as consumption reaches them (RFC 0084 section E)
    ELSIF d IS NOT NULL AND v.breach_pool > 0 THEN
        pool := pools[v.breach_pool];
        facts := jsonb_build_object(
            'reason', 'BUDGET_EXHAUSTED', 'state', run.state, 'scope', pool.scope,
            'scope_id', pool.scope_id, 'dimension', names[d], 'limit', v.breach_limit,
            'consumed', v.breach_used, 'observed', v.breach_observed,
            'breach_scope', pool.scope, 'breach_scope_id', pool.scope_id,
            'retry_after_seconds', extract(epoch FROM budget.window_end_v1(
                pool.window_kind, pool.window_start) - now));
    ELSIF d IS NOT NULL THEN
        IF (run.exhausted >> (d - 1)) & 1 = 0 THEN
            events := events || budget.run_event_v2(run, 'budget.exhausted', format(
                '{"dimension":"%s","consumed":%s,"limit":%s}', names[d],
                budget.amount_text(d, v.breach_used), budget.amount_text(d, v.breach_limit)));
            run.events := run.events + 1;
        END IF;
        events := events || budget.run_event_v2(run, 'cap.breached', format(
            '{"kind":"%s","limit":%s,"observed":%s}', kinds[d],
            budget.amount_text(d, v.breach_limit), budget.amount_text(d, v.breach_observed)));
        run.events := run.events + 1;
        run.exhausted := run.exhausted | (1 << (d - 1));
        run.breached := run.breached | (1 << (d - 1));
        run.touched := true;
        stop := budget.run_stop_v2(run, d, v.breach_limit, v.breach_used, v.breach_observed,
                                   'run', '');
        run := stop.run;
        events := events || stop.events;
        facts := jsonb_build_object(
            'reason', CASE run.state WHEN 'interrupted' THEN 'RUN_INTERRUPTED'
                                     ELSE 'BUDGET_EXHAUSTED' END,
            'state', run.state, 'scope', 'run', 'scope_id', '', 'dimension', names[d],
            'limit', v.breach_limit, 'consumed', v.breach_used, 'observed', v.breach_observed,
            'breach_scope', 'run', 'breach_scope_id', '');
    ELSIF v.held_dim IS NOT NULL AND NOT advisory THEN
        facts := jsonb_build_object(
            'reason', 'BUDGET_HELD',
            'scope', CASE WHEN v.held_pool = 0 THEN 'run' ELSE pools[v.held_pool].scope END,
            'scope_id', CASE WHEN v.held_pool = 0 THEN '' ELSE pools[v.held_pool].scope_id END,
            'dimension', names[v.held_dim], 'limit', v.held_limit, 'consumed', v.held_used,
            'held', v.held_held, 'requested', v.held_requested);
    END IF;
END;
$$;
