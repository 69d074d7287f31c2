-- budget.run_event_types_v2: The types of the run events among some events, in order (what a
-- decision's metrics count; a pool's own events are not the run's).
CREATE OR REPLACE FUNCTION budget.run_event_types_v2(events budget.engine_event_v2[])
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    types text[] := '{}';
BEGIN
    FOR e IN 1..coalesce(cardinality(events), 0) LOOP
        IF events[e].run_id IS NOT NULL THEN
            types := types || events[e].type;
        END IF;
    END LOOP;
    RETURN to_jsonb(types);
END;
$$;
