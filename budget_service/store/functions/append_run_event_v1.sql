-- budget.append_run_event_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Appends one event to a locked run's log at the run's next seq (the stamp_tx trigger gives it
-- its place in the tenant stream) and wakes the run's watchers: WatchRunEvents registers under
-- the run's lock (store/watchers.py), held here, so a watcher is either seen or reads the event.
CREATE OR REPLACE FUNCTION budget.append_run_event_v1(
    p_tenant text, p_run_id text, p_type text, p_payload text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
BEGIN
    UPDATE budget.runs SET next_seq = next_seq + 1
    WHERE tenant_id = p_tenant AND run_id = p_run_id
    RETURNING next_seq - 1 INTO v_seq;
    INSERT INTO budget.events (tenant_id, run_id, seq, type, payload_json, created_at)
    VALUES (p_tenant, p_run_id, v_seq, p_type, p_payload, now());
    IF EXISTS (SELECT 1 FROM budget.watchers w
               WHERE w.tenant_id = p_tenant AND w.run_id = p_run_id) THEN
        PERFORM pg_notify('ration_budget_events',
                          json_build_array(p_tenant, p_run_id, v_seq)::text);
    END IF;
END;
$$;
