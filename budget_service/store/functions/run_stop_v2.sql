-- budget.run_stop_v2: The hard-mode consequence of a breach of a run's own budget.
--
-- The breach is recorded as what stopped the run; on_exhaustion 'interrupt' makes it
-- INTERRUPTED (a ResumeRun approval may raise the limits), else it is FAILED with a
-- run.failed event {error: {code: budget_exhausted, message}} (DESIGN 3.4). `events` is the
-- run.failed event or empty. The oracle's twin: tests/support/oracle.py `_stop`.
CREATE OR REPLACE FUNCTION budget.run_stop_v2(
    INOUT run budget.engine_run_v2, d integer, lim bigint, used bigint, observed bigint,
    scope text, scope_id text, OUT events budget.engine_event_v2[])
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    names constant text[] := ARRAY['tokens', 'cost', 'toolCalls', 'retries', 'modelCalls'];
BEGIN
    events := '{}';
    run.stop_dim := names[d]; run.stop_lim := lim; run.stop_used := used;
    run.stop_obs := observed; run.stop_scope := scope; run.stop_scope_id := scope_id;
    IF run.on_exhaustion = 'interrupt' THEN
        run.state := 'interrupted';
        RETURN;
    END IF;
    run.state := 'failed';
    events := ARRAY[budget.run_event_v2(run, 'run.failed', format(
        '{"error":{"code":"budget_exhausted","message":%s}}',
        to_json(format('budget exhausted: %s limit %s, observed %s', names[d],
                       budget.amount_text(d, lim), budget.amount_text(d, observed)))::text))];
    run.events := run.events + 1;
END;
$$;
