-- budget.append_run_event_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Appends one event to a locked run's log (OpenRun, ResumeRun) the way the engine appends a
-- decision's: its seq is the run's next (budget.run_event_v2), the run's counter advances
-- (budget.write_balances_v2), and the event row goes in with a wake-up for the run's watchers
-- (budget.write_records_v2; the stamp_tx trigger gives it its place in the tenant stream).
-- WatchRunEvents registers under the run's lock, held here, so a watcher is either seen or
-- reads the event.
CREATE OR REPLACE FUNCTION budget.append_run_event_v1(
    p_tenant text, p_run_id text, p_type text, p_payload text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_now constant timestamptz := now();
    run budget.engine_run_v2;
    event budget.engine_event_v2;
BEGIN
    run := (budget.lock_runs_v2(p_tenant, ARRAY[p_run_id], false, v_now)).runs[1];
    event := budget.run_event_v2(run, p_type, p_payload);
    run.events := 1;
    run.touched := true;
    PERFORM budget.write_balances_v2(p_tenant, ARRAY[run], '{}', v_now);
    PERFORM budget.write_records_v2(p_tenant, ARRAY[run], '{}', '{}', '{}', ARRAY[event], '{}',
                                    '{}', '{}', v_now);
END;
$$;
