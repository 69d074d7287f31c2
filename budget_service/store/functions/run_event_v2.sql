-- budget.run_event_v2: A run's next event (seq follows the row's next_seq and the events this
-- batch appended before it). The caller counts it: run.events := run.events + 1.
CREATE OR REPLACE FUNCTION budget.run_event_v2(
    run budget.engine_run_v2, type text, payload text) RETURNS budget.engine_event_v2
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ROW(run.run_id, NULL, NULL, NULL, run.next_seq + run.events, type,
               payload)::budget.engine_event_v2
$$;
